// Owning handles for libevent objects.
#pragma once

#include <event2/event.h>

#include "daemon/c_handle.hpp"

namespace l5pg::daemon {

using EventPtr = CHandle<event, event_free>;
using EventBasePtr = CHandle<event_base, event_base_free>;

}  // namespace l5pg::daemon
