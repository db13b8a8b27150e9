// The upgrade handshakes' waits for l5pgd (declared in upgrade_common.hpp). In the shim's
// core, not with the handshakes, so that unit tests can run them without interposing.
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "clientlib/real_calls.hpp"
#include "clientlib/settings.hpp"
#include "clientlib/upgrade_common.hpp"

namespace l5pg::shim {
namespace {

// The upgrading thread's deadline (steady clock, ns since its epoch); 0: none running.
thread_local int64_t t_upgrade_deadline_ns = 0;

wait::Deadline::clock::duration upgrade_budget() {
    return std::chrono::milliseconds(settings().upgrade_timeout_ms);
}

}  // namespace

UpgradeClock::UpgradeClock() {
    if (t_upgrade_deadline_ns != 0)
        return;
    started_ = true;
    t_upgrade_deadline_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(
            (wait::Deadline::clock::now() + upgrade_budget()).time_since_epoch())
            .count();
}

UpgradeClock::~UpgradeClock() {
    if (started_)
        t_upgrade_deadline_ns = 0;
}

wait::Deadline upgrade_deadline() {
    if (t_upgrade_deadline_ns == 0)
        return wait::Deadline::after(upgrade_budget());
    return wait::Deadline::at(wait::Deadline::clock::time_point(
        std::chrono::duration_cast<wait::Deadline::clock::duration>(
            std::chrono::nanoseconds(t_upgrade_deadline_ns))));
}

bool await_connected(int fd) {
    if (wait::wait_ready(fd, POLLOUT, upgrade_deadline()) <= 0)
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
    const wait::Deadline deadline = upgrade_deadline();
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
