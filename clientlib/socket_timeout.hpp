// SO_RCVTIMEO and SO_SNDTIMEO of a blocking upgraded socket, which the kernel would apply to
// each blocking recv()/send() on it: a call that has waited that long fails with EAGAIN, or
// returns what it moved meanwhile. Read from the socket itself (the application set it with
// setsockopt(), which the shim does not interpose) once per call, and only when the call has
// to wait: non-blocking sockets (libpq's) never pay for it.
#pragma once

#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>

#include "transport/channel_end.hpp"

namespace l5pg::shim {

class SocketTimeout {
  public:
    SocketTimeout(int fd, transport::Want want) noexcept : fd_(fd), want_(want) {}

    // How long poll() may wait now, in milliseconds: -1 without a timeout, 0 once it passed.
    [[nodiscard]] int poll_ms() noexcept {
        if (!read_) {
            read_ = true;
            deadline_ = deadline_from_socket();
        }
        if (!deadline_)
            return -1;
        const auto left = *deadline_ - clock::now();
        if (left <= clock::duration::zero())
            return 0;
        // Rounded up: poll() must not come back before the deadline and find it not passed.
        const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
        return static_cast<int>(std::min<int64_t>(ms, std::numeric_limits<int>::max()));
    }

  private:
    using clock = std::chrono::steady_clock;

    [[nodiscard]] std::optional<clock::time_point> deadline_from_socket() const noexcept {
        timeval tv{};
        socklen_t len = sizeof tv;
        const int option = want_ == transport::Want::Read ? SO_RCVTIMEO : SO_SNDTIMEO;
        if (::getsockopt(fd_, SOL_SOCKET, option, &tv, &len) != 0 ||
            (tv.tv_sec == 0 && tv.tv_usec == 0))
            return std::nullopt;
        // The kernel takes timeouts of centuries; a year is as long for any program.
        constexpr int64_t kLongest = 365LL * 24 * 3600;
        if (tv.tv_sec >= kLongest)
            return clock::now() + std::chrono::seconds(kLongest);
        return clock::now() + std::chrono::seconds(tv.tv_sec) +
               std::chrono::microseconds(tv.tv_usec);
    }

    int fd_;
    transport::Want want_;
    bool read_ = false;
    std::optional<clock::time_point> deadline_;
};

}  // namespace l5pg::shim
