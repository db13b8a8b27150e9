// At a stop (SIGTERM, SIGQUIT, a drain's end), the statements l5pgd's sessions still wait for
// are cancelled before their connections close: Postgres notices a closed connection only
// when it next reads or writes it, so a statement would run on to its end after l5pgd left,
// an autocommit one committing what its client was told had been cut short (the 57P01 of
// Session::terminate_for_shutdown()). Postgres's own fast shutdown interrupts them; so does
// this. Each cancel goes on a connection of its own, all at once, within a bound: a server
// that does not take them does not hold the stop up.
#pragma once

#include <chrono>
#include <vector>

#include "daemon/cancel_keys.hpp"

namespace l5pg::daemon {

class ShutdownCancels {
  public:
    void add(const CancelKeys::Backend& backend) { backends_.push_back(backend); }
    // Connects, sends each CancelRequest and closes, for at most `budget` in all. Returns how
    // many were sent (written whole; Postgres reads them after the close).
    size_t send(std::chrono::milliseconds budget);

  private:
    std::vector<CancelKeys::Backend> backends_;
};

}  // namespace l5pg::daemon
