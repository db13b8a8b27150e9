// Descriptor lifecycle: connect marks l5pgd sockets as upgrade candidates; close,
// close_range, closefrom, dup* and F_DUPFD keep the fd table and channel references right; F_SETFL
// and FIONBIO keep a channel's idea of O_NONBLOCK current (checking it per call would cost a
// syscall); FIONREAD counts what the ring holds.
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdarg>

#include "clientlib/channel.hpp"
#include "clientlib/channel_ref.hpp"
#include "clientlib/debug_log.hpp"
#include "clientlib/fd_table.hpp"
#include "clientlib/real_calls.hpp"
#include "clientlib/settings.hpp"
#include "clientlib/upgrade.hpp"

using namespace l5pg::shim;

namespace {

// `closing_fd`: the fd the caller is about to close, or -1.
void release_entry(const FdEntry& entry, int closing_fd = -1) {
    if (entry.kind == FdKind::Upgraded)
        channel_release(*entry.channel, closing_fd);
}

// close_range(2) and closefrom(3) close each fd the shim tracks in the range as close()
// does, before the call closes the rest: an upgraded one says goodbye to l5pgd first (its
// last messages are delivered), and no entry stays behind for the numbers the kernel hands
// out again (a stale one would send a new file's bytes into the old rings). Should the call
// then fail (ENOSYS before Linux 5.9, a seccomp filter), no dead descriptor is left open.
void close_tracked_in_range(unsigned first, unsigned last) {
    const unsigned end = std::min<unsigned>(last, kMaxTrackedFd - 1);
    for (unsigned fd = first; fd <= end; ++fd) {
        const FdEntry entry = fd_forget(static_cast<int>(fd));
        if (entry.kind == FdKind::Untracked)
            continue;
        release_entry(entry, static_cast<int>(fd));
        (void)real().close(static_cast<int>(fd));
    }
}

void track_nonblocking(int fd, bool on) {
    if (const ChannelRef channel = ChannelRef::of(fd))
        channel->nonblocking.store(on, std::memory_order_relaxed);
}

// FIONREAD (SIOCINQ) on an upgraded socket: what recv() would return, not the doorbell bytes
// the kernel has queued on the socket. Java's InputStream.available(), which pgjdbc asks
// before it reads a notification, would otherwise promise bytes that are not there (and the
// read that follows block), or none while a notification waits in the ring.
void count_unread(int fd, int& count) {
    if (const ChannelRef channel = ChannelRef::of(fd))
        count = static_cast<int>(std::min<size_t>(channel_unread_bytes(*channel), INT_MAX));
}

template <class RealFcntl>
int fcntl_common(RealFcntl real_fcntl, int fd, int cmd, unsigned long arg) {
    const int rc = real_fcntl(fd, cmd, arg);
    if (rc < 0)
        return rc;
    if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
        fd_duplicate(fd, rc);
    if (cmd == F_SETFL)
        track_nonblocking(fd, (arg & O_NONBLOCK) != 0);
    return rc;
}

// dup2() and dup3() close fd2 first: an upgraded fd2 says goodbye to l5pgd as close() does,
// before the kernel drops the socket (l5pgd would otherwise see its EOF without the closed
// flag: a client that vanished). Only when the call will go ahead: `fd` is open, and the
// flags are ones dup3() takes.
void release_before_replacing(int fd, int fd2, int flags = 0) {
    if (fd == fd2 || (flags & ~O_CLOEXEC) != 0 || fd_lookup(fd2).kind != FdKind::Upgraded ||
        real().fcntl(fd, F_GETFD) < 0)
        return;
    release_entry(fd_forget(fd2), fd2);
}

}  // namespace

extern "C" {

int connect(int fd, const sockaddr* addr, socklen_t len) {
    const int rc = real().connect(fd, addr, len);
    // A connection begun on an fd number we still track (closed without close(): a raw
    // system call, close_range) starts from scratch. A connect() that fails (EISCONN on
    // a connected or upgraded socket, EALREADY, EBADF) leaves the entry as it is. One a
    // signal interrupted (EINTR) goes on in the background, as EINPROGRESS's does.
    if (rc != 0 && errno != EINPROGRESS && errno != EINTR)
        return rc;
    release_entry(fd_forget(fd));  // errno stays EINPROGRESS or EINTR
    if (settings().mode != TransportMode::Off) {
        const int saved = errno;
        if (is_l5pgd_socket(addr, len)) {
            fd_set_candidate(fd);
            debug_log()
                .str("fd ")
                .inum(fd)
                .str(": connected to an l5pgd socket, upgrade candidate")
                .end();
        } else if (is_rdma_upgrade_target(addr, len)) {
            fd_set_rdma_candidate(fd);
            debug_log()
                .str("fd ")
                .inum(fd)
                .str(": TCP connection to a port in L5PG_RDMA_PORTS, RDMA upgrade candidate")
                .end();
        }
        errno = saved;
    }
    return rc;
}

int close(int fd) {
    release_entry(fd_forget(fd), fd);
    return real().close(fd);
}

int close_range(unsigned first, unsigned last, int flags) {
    // The kernel refuses first > last and unknown flags (EINVAL) and closes nothing then;
    // CLOSE_RANGE_CLOEXEC only marks the fds. CLOSE_RANGE_UNSHARE closes them too: in a
    // private copy of the fd table when other threads share it (rare: it is made for a
    // child about to exec), so it counts as closing here. In a vfork() child nothing of
    // the table changes (fd_table.hpp).
    if (first <= last && (flags & ~static_cast<int>(CLOSE_RANGE_UNSHARE)) == 0)
        close_tracked_in_range(first, last);
    return real().close_range(first, last, flags);
}

void closefrom(int lowfd) {
    close_tracked_in_range(lowfd < 0 ? 0U : static_cast<unsigned>(lowfd), ~0U);  // as glibc
    real().closefrom(lowfd);
}

int dup(int fd) {
    const int rc = real().dup(fd);
    if (rc >= 0)
        fd_duplicate(fd, rc);
    return rc;
}

int dup2(int fd, int fd2) {
    release_before_replacing(fd, fd2);
    const int rc = real().dup2(fd, fd2);
    if (rc >= 0)
        fd_duplicate(fd, rc);
    return rc;
}

int dup3(int fd, int fd2, int flags) {
    release_before_replacing(fd, fd2, flags);
    const int rc = real().dup3(fd, fd2, flags);
    if (rc >= 0)
        fd_duplicate(fd, rc);
    return rc;
}

// The third argument is an int, a long or a pointer depending on `cmd`; on the
// x86-64/aarch64 ABIs reading it as unsigned long and passing it on is exact.
int fcntl(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    const unsigned long arg = va_arg(ap, unsigned long);
    va_end(ap);
    return fcntl_common(real().fcntl, fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    const unsigned long arg = va_arg(ap, unsigned long);
    va_end(ap);
    return fcntl_common(real().fcntl64, fd, cmd, arg);
}

int ioctl(int fd, unsigned long request, ...) {
    va_list ap;
    va_start(ap, request);
    void* arg = va_arg(ap, void*);
    va_end(ap);
    // The kernel first: it answers for the descriptor and the pointer (EBADF, EFAULT).
    const int rc = real().ioctl(fd, request, arg);
    if (rc != 0 || arg == nullptr)
        return rc;
    if (request == FIONBIO)
        track_nonblocking(fd, *static_cast<const int*>(arg) != 0);
    else if (request == FIONREAD)
        count_unread(fd, *static_cast<int*>(arg));
    return rc;
}

}  // extern "C"
