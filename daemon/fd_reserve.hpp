// The classic answer to running out of file descriptors in an acceptor: keep a spare
// descriptor (an open /dev/null) so that, when accept() fails with EMFILE, l5pgd can
// still take the waiting connections off the listen queue one at a time, tell each why
// (a PostgreSQL error) and close it, instead of leaving them to hang or retrying accept()
// in a busy loop.
//
// l5pgd has other threads that take descriptors (the metrics endpoint accepts scrapes, the
// workers connect upstream), and the slot a spare frees goes to whichever thread asks
// first. With one spare, a scrape accepted into that slot left the waiting clients
// unanswered until the metrics endpoint closed it (up to its 10 s timeout; the likely cause
// of a refusal that did not come within 5 s, once, in test_exhaustion.py). So the reserve
// keeps several, and gives up the next one when accept() still finds the table full.
#pragma once

#include <array>
#include <cstddef>
#include <span>

#include "daemon/unique_fd.hpp"

namespace l5pg::daemon {

class FdReserve {
  public:
    static constexpr size_t kSpares = 3;

    FdReserve() { refill(); }

    // Accepts up to `max` waiting connections on `listen_fd`, sends each `refusal` and closes
    // it; gives up a spare whenever accept() fails for want of a descriptor. Takes the spares
    // back afterwards (those whose slots another thread holds, when refill() next succeeds).
    // Returns how many connections were refused.
    size_t refuse_waiting(int listen_fd, std::span<const std::byte> refusal, size_t max);

    // Reopens the missing spares; false while one of them still cannot be opened.
    bool refill();

    [[nodiscard]] size_t spares() const noexcept;

  private:
    // Closes one spare; false when none is left.
    bool release_one() noexcept;

    std::array<UniqueFd, kSpares> spares_;
};

}  // namespace l5pg::daemon
