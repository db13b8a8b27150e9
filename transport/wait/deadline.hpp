// When a wait must end, as poll() takes it: the one rounding rule for the shim's upgrade
// steps (L5PG_UPGRADE_TIMEOUT_MS), an upgraded socket's SO_RCVTIMEO/SO_SNDTIMEO and the
// RDMA channel's connection exchange. A loop of short reads or writes, EINTR (an
// application's interval timer) and spurious wake-ups all draw on the same deadline.
#pragma once

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>

namespace l5pg::wait {

class Deadline {
  public:
    using clock = std::chrono::steady_clock;

    [[nodiscard]] static Deadline never() noexcept { return Deadline(std::nullopt); }
    [[nodiscard]] static Deadline after(clock::duration budget) noexcept {
        return Deadline(clock::now() + budget);
    }
    [[nodiscard]] static Deadline at(clock::time_point when) noexcept { return Deadline(when); }

    // poll()'s timeout now: -1 for never, 0 once passed, else what is left rounded up (poll()
    // must not come back before the deadline and find it not passed), at most INT_MAX ms.
    [[nodiscard]] int poll_ms() const noexcept {
        return at_ ? poll_ms_for(*at_ - clock::now()) : -1;
    }
    [[nodiscard]] bool passed() const noexcept { return poll_ms() == 0; }
    // What is left (zero once passed); nothing for never.
    [[nodiscard]] std::optional<clock::duration> left() const noexcept {
        if (!at_)
            return std::nullopt;
        return std::max(*at_ - clock::now(), clock::duration::zero());
    }
    // The rule itself, for what is `left`.
    [[nodiscard]] static int poll_ms_for(clock::duration left) noexcept {
        if (left <= clock::duration::zero())
            return 0;
        const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
        return static_cast<int>(std::min<int64_t>(ms, std::numeric_limits<int>::max()));
    }

  private:
    explicit Deadline(std::optional<clock::time_point> at) noexcept : at_(at) {}
    std::optional<clock::time_point> at_;
};

// poll(2) by system call (ppoll), past the shim's own poll(): -1 waits for ever.
[[nodiscard]] int poll_raw(pollfd* fds, nfds_t n, int timeout_ms) noexcept;

// Waits until `fd` is ready for `events`, again after EINTR, until `deadline`; readiness
// wins over a deadline that passed (a connect that finished meanwhile has). 1: ready (or
// POLLERR/POLLHUP: the next call on fd says what); 0: the deadline passed, errno
// ETIMEDOUT; -1: poll()'s error.
[[nodiscard]] int wait_ready(int fd, short events, const Deadline& deadline) noexcept;

}  // namespace l5pg::wait
