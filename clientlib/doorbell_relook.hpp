// How long a wait that may sleep through its doorbell sleeps before it looks at the rings
// anyway (end_waiters.hpp, may_miss_doorbell()). A doorbell lost to another thread's drain
// is most likely lost while the rings change fast (a COPY that fills the ring, with a thread
// beside it waiting for the answer): the first looks come soon, and a wait that is long for
// its own reasons (Postgres slow to read) soon costs only a wake-up every 64 ms.
#pragma once

#include <algorithm>
#include <chrono>

namespace l5pg::shim {

class DoorbellRelook {
  public:
    // The interval until the next look: 1 ms, doubling each time, up to 64 ms.
    [[nodiscard]] std::chrono::milliseconds next() {
        const int ms = next_ms_;
        next_ms_ = std::min(next_ms_ * 2, kLongestMs);
        return std::chrono::milliseconds(ms);
    }

    // A poll() timeout of `ms` (-1: none) cut to the next look.
    [[nodiscard]] int cut(int ms) {
        const int look = static_cast<int>(next().count());
        return ms < 0 ? look : std::min(ms, look);
    }

  private:
    static constexpr int kLongestMs = 64;
    int next_ms_ = 1;
};

}  // namespace l5pg::shim
