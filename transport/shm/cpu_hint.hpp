// Transitional: the placement hints moved to transport/wait/cpu_hint.hpp; this header
// keeps the old name in `shm` for daemon/session.cpp (see shm/wait.hpp).
#pragma once

#include "transport/wait/cpu_hint.hpp"

namespace l5pg::shm {

using wait::publish_and_compare;

}  // namespace l5pg::shm
