// The upgrade handshakes' waits for l5pgd (declared in upgrade_common.hpp). In the shim's
// core, not with the handshakes, so that unit tests can run them without interposing.
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "clientlib/real_calls.hpp"
#include "clientlib/settings.hpp"
#include "clientlib/upgrade_common.hpp"

namespace l5pg::shim {

bool wait_for(int fd, short events, const UpgradeDeadline& deadline) noexcept {
    const int remaining_ms = deadline.remaining_ms();
    pollfd p{fd, events, 0};
    const int rc = remaining_ms > 0 ? real().poll(&p, 1, remaining_ms) : 0;
    if (rc == 0) {
        errno = ETIMEDOUT;
        return false;
    }
    return rc > 0 || errno == EINTR;
}

bool await_connected(int fd) noexcept {
    const UpgradeDeadline deadline(settings().upgrade_timeout_ms);
    for (;;) {
        pollfd p{fd, POLLOUT, 0};
        const int rc = real().poll(&p, 1, 0);  // EINTR too when a signal is pending
        if (rc > 0)
            break;
        if (rc < 0 && errno != EINTR)
            return false;
        if (!wait_for(fd, POLLOUT, deadline))
            return false;  // ETIMEDOUT or poll's error; EINTR only looks again
    }
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        return false;
    if (err != 0) {
        errno = err;
        return false;
    }
    return true;
}

char await_answer(int fd) noexcept {
    const UpgradeDeadline deadline(settings().upgrade_timeout_ms);
    for (;;) {
        if (!wait_for(fd, POLLIN, deadline))
            return 0;
        char answer = 0;
        const ssize_t n = real().recv(fd, &answer, 1, MSG_DONTWAIT);
        if (n == 1)
            return answer;
        if (n == 0) {
            errno = ECONNRESET;
            return 0;
        }
        if (errno != EAGAIN && errno != EINTR)
            return 0;
    }
}

}  // namespace l5pg::shim
