// One doorbell per blocked client wait, not one per session (transport/wait/wait_id.hpp).
//
// A client thread that polls many SHM sessions arms all their flags under one wait name
// before it sleeps. Each answer the worker publishes takes its session's flag; the first
// doorbell wakes the thread, and until it runs and disarms the rest, every further answer
// used to ring as well: measured with 64 pgbench clients on two threads, 0.7 doorbells per
// transaction against 0.1 wake-ups of the client (docs/performance.md, "One doorbell per
// client wait"). The worker remembers the last waits it rang for, by the client's pid (from
// SO_PEERCRED, so one client cannot name another's waits) and the wait's name, and skips a
// doorbell for a wait it has rung already: that wait has ended, or is about to, and its
// thread looks at every ring when it wakes. Clients whose pid l5pgd cannot see (another
// pid namespace) all have pid 0; their names still start at a random number per process,
// which nobody else can read, so one cannot silence another's doorbells.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "transport/wait/wait_id.hpp"

namespace l5pg::daemon {

class DoorbellCoalescer {
  public:
    // True when the doorbell must be rung (and it is remembered as rung): the wait is
    // unnamed, or this worker has not rung for it recently.
    [[nodiscard]] bool must_ring(pid_t client_pid, uint64_t wait_id) noexcept {
        if (wait_id == wait::kUnnamedWait)
            return true;
        for (const Rung& r : recent_)
            if (r.wait_id == wait_id && r.pid == client_pid)
                return false;
        recent_[next_] = Rung{client_pid, wait_id};
        next_ = (next_ + 1) % recent_.size();
        return true;
    }

  private:
    struct Rung {
        pid_t pid = 0;
        uint64_t wait_id = wait::kUnnamedWait;
    };
    // A few client threads' waits at once (each pgbench thread, say, has one).
    std::array<Rung, 8> recent_{};
    size_t next_ = 0;
};

}  // namespace l5pg::daemon
