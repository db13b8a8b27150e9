#include "clientlib/foreign_waiters.hpp"

#include <sys/socket.h>

#include <atomic>

#include "clientlib/channel.hpp"
#include "clientlib/channel_ref.hpp"
#include "clientlib/debug_log.hpp"
#include "clientlib/fd_table.hpp"
#include "clientlib/settings.hpp"

namespace l5pg::shim {
namespace {

// Sticky: once an epoll set may watch one of our sockets, it may watch any of them.
std::atomic<bool> g_foreign_waiters{false};

// Conservative: any Unix-domain socket counts (and with L5PG_TRANSPORT=rdma any TCP
// socket), since a socket may be registered before connect() tells us it leads to l5pgd.
bool may_become_ours(int fd) noexcept {
    if (fd_lookup(fd).kind != FdKind::Untracked)
        return true;
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
        return false;
    if (addr.ss_family == AF_UNIX)
        return true;
    return settings().mode == TransportMode::Rdma &&
           (addr.ss_family == AF_INET || addr.ss_family == AF_INET6);
}

}  // namespace

bool foreign_waiters_possible() noexcept {
    return g_foreign_waiters.load(std::memory_order_relaxed);
}

void note_epoll_ctl(int op, int fd) noexcept {
    if (op == EPOLL_CTL_DEL || g_foreign_waiters.load(std::memory_order_relaxed) ||
        !may_become_ours(fd))
        return;
    g_foreign_waiters.store(true, std::memory_order_relaxed);
    debug_log().str("fd ").inum(fd).str(": registered with epoll; keeping sockets readable").end();
    // Channels used so far did not keep the invariant: establish it on each of them.
    for (int other = 0; other < kMaxTrackedFd; ++other)
        if (const ChannelRef channel = ChannelRef::of(other))
            channel_prepare_for_foreign_wait(*channel, other);
}

}  // namespace l5pg::shim
