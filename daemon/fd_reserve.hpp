// The classic answer to running out of file descriptors in an acceptor: keep one spare
// descriptor (an open /dev/null) so that, when accept() fails with EMFILE, l5pgd can
// still take the waiting connections off the listen queue one at a time, tell each why
// (a PostgreSQL error) and close it, instead of leaving them to hang or retrying accept()
// in a busy loop.
#pragma once

#include <cstddef>
#include <span>

#include "daemon/unique_fd.hpp"

namespace l5pg::daemon {

class FdReserve {
  public:
    FdReserve() { refill(); }

    // Gives up the spare descriptor, then accepts up to `max` waiting connections on
    // `listen_fd`, sends each `refusal` and closes it. Takes the spare back afterwards
    // (when another thread grabbed the freed slot meanwhile, refill() retries later).
    // Returns how many connections were refused.
    size_t refuse_waiting(int listen_fd, std::span<const std::byte> refusal, size_t max);

    // Reopens the spare descriptor if it is missing; false while that still fails.
    bool refill();

  private:
    UniqueFd spare_;
};

}  // namespace l5pg::daemon
