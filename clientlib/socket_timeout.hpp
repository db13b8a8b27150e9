// SO_RCVTIMEO and SO_SNDTIMEO of a blocking upgraded socket, which the kernel would apply to
// each blocking recv()/send() on it: a call that has waited that long fails with EAGAIN, or
// returns what it moved meanwhile. Read from the socket itself (the application set it with
// setsockopt(), which the shim does not interpose) once per call, and only when the call has
// to wait: non-blocking sockets (libpq's) never pay for it.
#pragma once

#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <optional>

#include "transport/channel_end.hpp"
#include "transport/wait/deadline.hpp"

namespace l5pg::shim {

class SocketTimeout {
  public:
    SocketTimeout(int fd, transport::Want want) : fd_(fd), want_(want) {}

    // How long poll() may wait now, in milliseconds: -1 without a timeout, 0 once it passed.
    [[nodiscard]] int poll_ms() { return deadline().poll_ms(); }
    // What is left of the timeout; nothing without one.
    [[nodiscard]] std::optional<wait::Deadline::clock::duration> left() {
        return deadline().left();
    }

  private:
    const wait::Deadline& deadline() {
        if (!deadline_)
            deadline_ = deadline_from_socket();
        return *deadline_;
    }

    [[nodiscard]] wait::Deadline deadline_from_socket() const {
        timeval tv{};
        socklen_t len = sizeof tv;
        const int option = want_ == transport::Want::Read ? SO_RCVTIMEO : SO_SNDTIMEO;
        const int saved = errno;  // EBADF once another thread closed the fd: not our answer
        const bool read = ::getsockopt(fd_, SOL_SOCKET, option, &tv, &len) == 0;
        errno = saved;
        if (!read || (tv.tv_sec == 0 && tv.tv_usec == 0))
            return wait::Deadline::never();
        // The kernel takes timeouts of centuries; a year is as long for any program.
        constexpr int64_t kLongest = 365LL * 24 * 3600;
        if (tv.tv_sec >= kLongest)
            return wait::Deadline::after(std::chrono::seconds(kLongest));
        return wait::Deadline::after(std::chrono::seconds(tv.tv_sec) +
                                     std::chrono::microseconds(tv.tv_usec));
    }

    int fd_;
    transport::Want want_;
    std::optional<wait::Deadline> deadline_;  // read from the socket at the first wait
};

}  // namespace l5pg::shim
