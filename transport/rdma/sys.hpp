// Small OS helpers for the RDMA transport: an owning fd, raw socket and poll system calls
// (this code is linked into the LD_PRELOAD shim, whose own send/recv/poll wrappers must
// not see the soft device's traffic), a thread with signals blocked, and little-endian
// encoding for everything that crosses the network.
#pragma once

#include <poll.h>
#include <sys/epoll.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "transport/unique_fd.hpp"

namespace l5pg::rdma::sys {

using UniqueFd = l5pg::UniqueFd;

[[nodiscard]] ssize_t send_raw(int fd, const void* buf, size_t len, int flags) noexcept;
[[nodiscard]] ssize_t recv_raw(int fd, void* buf, size_t len, int flags) noexcept;
// poll(2): wait::poll_raw (transport/wait/deadline.hpp).
// epoll_ctl(2) and epoll_wait(2) (through epoll_pwait), past the shim's wrappers.
[[nodiscard]] int epoll_ctl_raw(int epfd, int op, int fd, epoll_event* event) noexcept;
[[nodiscard]] int epoll_wait_raw(int epfd, epoll_event* events, int max, int timeout_ms) noexcept;
[[nodiscard]] bool set_nonblocking(int fd) noexcept;

// "<what>: <strerror(err)>"
[[nodiscard]] std::string errno_text(const char* what, int err);

// A joinable thread started with every signal blocked (signals meant for the
// application must not be delivered to a transport thread). Joined on destruction.
class Thread {
  public:
    Thread() = default;
    Thread(const Thread&) = delete;
    Thread& operator=(const Thread&) = delete;
    ~Thread() { join(); }

    [[nodiscard]] bool start(std::function<void()> body, std::string& error);
    void join() noexcept;

  private:
    static void* trampoline(void* self) noexcept;

    std::function<void()> body_;
    unsigned long handle_ = 0;  // pthread_t
    bool running_ = false;
};

inline void put_le(std::byte* p, uint64_t v, size_t n) noexcept {
    for (size_t i = 0; i < n; ++i)
        p[i] = static_cast<std::byte>(v >> (8 * i));
}
[[nodiscard]] inline uint64_t get_le(const std::byte* p, size_t n) noexcept {
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i)
        v |= static_cast<uint64_t>(p[i]) << (8 * i);
    return v;
}

}  // namespace l5pg::rdma::sys
