#include "clientlib/foreign_waiters.hpp"

#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "clientlib/channel.hpp"
#include "clientlib/channel_ref.hpp"
#include "clientlib/debug_log.hpp"
#include "clientlib/fd_table.hpp"
#include "clientlib/proc_fds.hpp"
#include "clientlib/real_calls.hpp"
#include "clientlib/settings.hpp"

namespace l5pg::shim {
namespace {

// Sticky: once an epoll set may watch one of our sockets, it may watch any of them.
std::atomic<bool> g_foreign_waiters{false};

// Conservative: any Unix-domain socket counts (and with L5PG_TRANSPORT=rdma any TCP
// socket), since a socket may be registered before connect() tells us it leads to l5pgd.
bool may_become_ours(int fd) {
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

void expect_foreign_waiters(const char* why, int fd) {
    g_foreign_waiters.store(true, std::memory_order_relaxed);
    debug_log().str("fd ").inum(fd).str(why).end();
    // Channels used so far did not keep the invariant: establish it on each of them.
    for (int other = 0; other < kMaxTrackedFd; ++other)
        if (const ChannelRef channel = ChannelRef::of(other))
            channel_prepare_for_foreign_wait(*channel, other);
}

// Whether /proc/self/fd/<name> is an io_uring instance ("anon_inode:[io_uring]").
bool is_io_uring(int dir, const char* name) {
    static constexpr char kTarget[] = "anon_inode:[io_uring]";
    char link[sizeof kTarget];
    const ssize_t n = ::readlinkat(dir, name, link, sizeof link);
    return n == static_cast<ssize_t>(sizeof kTarget - 1) &&
           std::memcmp(link, kTarget, sizeof kTarget - 1) == 0;
}

// The first io_uring instance among the process's descriptors, or -1.
int find_io_uring() {
    int found = -1;
    (void)walk_open_fds([&](int dir, const char* name, int fd) {
        if (is_io_uring(dir, name))
            found = fd;
        return found >= 0;
    });
    return found;
}

}  // namespace

void note_io_uring_instances() {
    if (g_foreign_waiters.load(std::memory_order_relaxed))
        return;
    // A look costs a readlinkat() per open descriptor: at most one a second (event loops make
    // their instance when they start, before they connect; pgbench -c 64 looks once).
    static std::atomic<int64_t> last_look_s{-1};
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    int64_t previous = last_look_s.load(std::memory_order_relaxed);
    if (previous == now.tv_sec ||
        !last_look_s.compare_exchange_strong(previous, now.tv_sec, std::memory_order_relaxed))
        return;
    if (const int ring = find_io_uring(); ring >= 0)
        expect_foreign_waiters(
            ": an io_uring instance, which may register sockets with epoll "
            "unseen; keeping sockets readable",
            ring);
}

bool foreign_waiters_possible() {
    return g_foreign_waiters.load(std::memory_order_relaxed);
}

void note_epoll_ctl(int op, int fd) {
    if (op == EPOLL_CTL_DEL || g_foreign_waiters.load(std::memory_order_relaxed) ||
        !may_become_ours(fd))
        return;
    expect_foreign_waiters(": registered with epoll; keeping sockets readable", fd);
}

}  // namespace l5pg::shim
