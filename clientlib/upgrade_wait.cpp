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
thread_local bool t_upgrade_fallback = false;  // begin_fallback() was called

int64_t budget_from_now_ns() {
    const auto at =
        wait::Deadline::clock::now() + std::chrono::milliseconds(settings().upgrade_timeout_ms);
    return std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count();
}

}  // namespace

UpgradeClock::UpgradeClock()
    : outer_deadline_ns_(t_upgrade_deadline_ns), outer_fallback_(t_upgrade_fallback) {
    t_upgrade_deadline_ns = budget_from_now_ns();
    t_upgrade_fallback = false;
}

UpgradeClock::~UpgradeClock() {
    t_upgrade_deadline_ns = outer_deadline_ns_;
    t_upgrade_fallback = outer_fallback_;
}

void UpgradeClock::begin_fallback() {
    if (t_upgrade_deadline_ns == 0 || t_upgrade_fallback)
        return;
    t_upgrade_fallback = true;
    t_upgrade_deadline_ns = budget_from_now_ns();
}

wait::Deadline upgrade_deadline() {
    const int64_t at_ns = t_upgrade_deadline_ns != 0 ? t_upgrade_deadline_ns : budget_from_now_ns();
    return wait::Deadline::at(wait::Deadline::clock::time_point(
        std::chrono::duration_cast<wait::Deadline::clock::duration>(
            std::chrono::nanoseconds(at_ns))));
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
