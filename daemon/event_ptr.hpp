// Owning handles for libevent objects, and durations as libevent takes them.
#pragma once

#include <event2/event.h>

#include <chrono>

#include "daemon/c_handle.hpp"

namespace l5pg::daemon {

using EventPtr = CHandle<event, event_free>;
using EventBasePtr = CHandle<event_base, event_base_free>;

[[nodiscard]] inline timeval to_timeval(std::chrono::microseconds us) noexcept {
    return {static_cast<time_t>(us.count() / 1000000),
            static_cast<suseconds_t>(us.count() % 1000000)};
}

}  // namespace l5pg::daemon
