// l5pgd's owning file descriptor is the project-wide one.
#pragma once

#include "transport/unique_fd.hpp"

namespace l5pg::daemon {
using UniqueFd = l5pg::UniqueFd;
}  // namespace l5pg::daemon
