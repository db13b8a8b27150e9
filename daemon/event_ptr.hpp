// Owning handles for libevent objects.
#pragma once

#include <event2/event.h>

#include <memory>

namespace l5pg::daemon {

struct EventDeleter {
    void operator()(event* ev) const noexcept { event_free(ev); }
};
using EventPtr = std::unique_ptr<event, EventDeleter>;

struct EventBaseDeleter {
    void operator()(event_base* base) const noexcept { event_base_free(base); }
};
using EventBasePtr = std::unique_ptr<event_base, EventBaseDeleter>;

}  // namespace l5pg::daemon
