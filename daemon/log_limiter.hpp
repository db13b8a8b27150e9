// Rate limit for a repeated log line: at most one per interval, and the line that is
// written says how many were suppressed since the last one (so a flood of refused
// connections cannot fill the disk, and nothing is silently lost).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace l5pg::daemon {

class LogLimiter {
  public:
    using clock = std::chrono::steady_clock;
    explicit LogLimiter(clock::duration interval = std::chrono::seconds(1)) : interval_(interval) {}

    // nullopt: do not log this one. Otherwise log it, with the number suppressed before.
    [[nodiscard]] std::optional<uint64_t> admit(clock::time_point now) noexcept {
        if (logged_once_ && now - last_ < interval_) {
            ++suppressed_;
            return std::nullopt;
        }
        logged_once_ = true;
        last_ = now;
        const uint64_t suppressed = suppressed_;
        suppressed_ = 0;
        return suppressed;
    }

  private:
    clock::duration interval_;
    clock::time_point last_{};
    bool logged_once_ = false;
    uint64_t suppressed_ = 0;
};

}  // namespace l5pg::daemon
