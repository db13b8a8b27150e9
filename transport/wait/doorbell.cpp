#include "transport/wait/doorbell.hpp"

#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace l5pg::wait {

// Raw system calls: this code is also linked into the LD_PRELOAD shim, whose own
// send()/recv() wrappers must not see doorbell traffic.
namespace {

ssize_t raw_send(int sock, const void* buf, size_t len, int flags) noexcept {
    return ::syscall(SYS_sendto, sock, buf, len, flags, nullptr, 0);
}

ssize_t raw_recv(int sock, void* buf, size_t len, int flags) noexcept {
    return ::syscall(SYS_recvfrom, sock, buf, len, flags, nullptr, nullptr);
}

}  // namespace

bool ring_doorbell(int sock) noexcept {
    const int saved = errno;  // async-signal-safe callers must not see errno change
    const char byte = 1;
    ssize_t n;
    do {
        n = raw_send(sock, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    const bool ok = n == 1 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
    errno = saved;
    return ok;
}

DrainResult drain_doorbells(int sock, size_t& count, size_t budget, PassedFds* passed) noexcept {
    count = 0;
    char buf[256];
    while (count < budget) {
        const size_t want = std::min(sizeof buf, budget - count);
        const ssize_t n = passed != nullptr
                              ? recv_taking_fds(sock, buf, want, MSG_DONTWAIT, *passed)
                              : raw_recv(sock, buf, want, MSG_DONTWAIT);
        if (n > 0) {
            count += static_cast<size_t>(n);
            if (passed != nullptr && passed->count > 0)
                return DrainResult::Drained;  // the caller deals with them first
            continue;
        }
        if (n == 0)
            return DrainResult::PeerClosed;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return DrainResult::Drained;
        return DrainResult::Error;
    }
    // Budget spent: the rest stays queued and the socket stays readable, so a
    // level-triggered poller comes back after the other sessions had their turn.
    return DrainResult::Drained;
}

}  // namespace l5pg::wait
