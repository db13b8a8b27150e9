// The upgrade handshakes' waits for l5pgd (declared in upgrade_common.hpp). In the shim's
// core, not with the handshakes, so that unit tests can run them without interposing.
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "clientlib/real_calls.hpp"
#include "clientlib/settings.hpp"
#include "clientlib/upgrade_common.hpp"

namespace l5pg::shim {

bool await_connected(int fd) {
    if (wait::wait_ready(fd, POLLOUT, upgrade_deadline(settings().upgrade_timeout_ms)) <= 0)
        return false;  // ETIMEDOUT or poll's error
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

char await_answer(int fd) {
    const wait::Deadline deadline = upgrade_deadline(settings().upgrade_timeout_ms);
    for (;;) {
        if (wait::wait_ready(fd, POLLIN, deadline) <= 0)
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
