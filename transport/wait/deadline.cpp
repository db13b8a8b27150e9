#include "transport/wait/deadline.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

namespace l5pg::wait {

int poll_raw(pollfd* fds, nfds_t n, int timeout_ms) noexcept {
    timespec ts{};
    timespec* tsp = nullptr;
    if (timeout_ms >= 0) {
        ts.tv_sec = timeout_ms / 1000;
        ts.tv_nsec = static_cast<long>(timeout_ms % 1000) * 1000000L;
        tsp = &ts;
    }
    return static_cast<int>(::syscall(SYS_ppoll, fds, n, tsp, nullptr, 0));
}

int wait_ready(int fd, short events, const Deadline& deadline) noexcept {
    for (;;) {
        const int ms = deadline.poll_ms();
        pollfd p{fd, events, 0};
        const int rc = poll_raw(&p, 1, ms);
        if (rc > 0)
            return 1;
        if (rc < 0 && errno != EINTR)
            return -1;
        if (ms == 0) {  // looked once more after the deadline: not ready
            errno = ETIMEDOUT;
            return 0;
        }
    }
}

}  // namespace l5pg::wait
