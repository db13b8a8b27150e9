// The interposed data calls: send/recv and friends, read/write, readv/writev and the
// _FORTIFY_SOURCE __*_chk variants. Untracked fds cost one atomic load and go straight
// to libc; upgraded fds go through their Channel.
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "clientlib/c_boundary.hpp"
#include "clientlib/cancellation_deferred.hpp"
#include "clientlib/channel.hpp"
#include "clientlib/channel_ref.hpp"
#include "clientlib/fd_table.hpp"
#include "clientlib/real_calls.hpp"
#include "clientlib/upgrade.hpp"

extern "C" [[noreturn]] void __chk_fail(void);

namespace l5pg::shim {
namespace {

enum class RouteKind { Real, Channel, Error, Eof };
struct Route {
    RouteKind kind = RouteKind::Real;
    ChannelRef channel;  // Channel: held until the call returns (channel_ref.hpp)
};

// An fd another thread closed just now is libc's again (EBADF, or its new use).
Route via_channel(int fd) {
    ChannelRef channel = ChannelRef::of(fd);
    if (!channel)
        return {RouteKind::Real, {}};
    return {RouteKind::Channel, std::move(channel)};
}

// The argument checks the kernel makes before it looks at a socket (readv(2), writev(2)),
// as an errno, or 0: a count outside 0..IOV_MAX is EINVAL, an array it cannot read EFAULT (of
// invalid addresses only null is caught, here and below), a length that is negative as an
// ssize_t EINVAL. (A sum beyond SSIZE_MAX, which only invalid buffers reach, is EINVAL here
// too, as readv(2) says; the kernel caps it and then fails with EFAULT.)
int iov_refusal(const iovec* iov, int iovcnt) {
    if (iovcnt < 0 || iovcnt > IOV_MAX)
        return EINVAL;
    if (iov == nullptr && iovcnt > 0)
        return EFAULT;
    size_t total = 0;
    for (int i = 0; i < iovcnt; ++i) {
        if (iov[i].iov_len > static_cast<size_t>(SSIZE_MAX) - total)
            return EINVAL;
        total += iov[i].iov_len;
    }
    return 0;
}

// A null buffer of non-zero length: the kernel's copy from or to it fails with EFAULT; the
// rings' memcpy would crash the program instead.
bool null_piece(const iovec* iov, int iovcnt) {
    for (int i = 0; i < iovcnt; ++i)
        if (iov[i].iov_base == nullptr && iov[i].iov_len > 0)
            return true;
    return false;
}

bool refused(int error) {
    if (error == 0)
        return false;
    errno = error;
    return true;
}

// sendmsg(2) and recvmsg(2) refuse more than IOV_MAX pieces with EMSGSIZE.
bool too_many_pieces(int fd, const msghdr* msg) {
    if (fd_lookup(fd).kind != FdKind::Upgraded || msg->msg_iovlen <= IOV_MAX)
        return false;
    errno = EMSGSIZE;
    return true;
}

size_t gather_prefix(const iovec* iov, int iovcnt, std::byte* out, size_t max) {
    size_t n = 0;
    for (int i = 0; i < iovcnt && n < max; ++i) {
        const size_t take = std::min(iov[i].iov_len, max - n);
        std::memcpy(out + n, iov[i].iov_base, take);
        n += take;
    }
    return n;
}

Route route_send(int fd, const iovec* iov, int iovcnt);

// Another thread's first send is upgrading `fd`: the call waits for the outcome (bytes sent
// meanwhile on the bare socket would reach l5pgd in the middle of the upgrade, and l5pgd's
// answer is not the caller's to read), also when non-blocking, as the first send itself
// does: an EAGAIN now would come with no readiness to wait for (poll() and epoll see the
// bare socket until the upgrade settles). EAGAIN only if it outlasts fd_await_upgrade().
bool await_upgrade(int fd) {
    if (fd_await_upgrade(fd))
        return true;
    errno = EAGAIN;
    return false;
}

// The upgrade of a claimed fd (Upgrading): attached or abandoned whatever happens, with the
// thread's cancellation deferred meanwhile (at most L5PG_UPGRADE_TIMEOUT_MS per step of
// the handshake), and an exception (std::bad_alloc) abandons it before it goes on.
Route upgrade_claimed(int fd, const iovec* iov, int iovcnt, bool rdma) {
    const CancellationDeferred whole_upgrade;
    std::byte first[16];
    const size_t n = gather_prefix(iov, iovcnt, first, sizeof first);
    Channel* channel = nullptr;
    UpgradeResult result = UpgradeResult::Failed;
    try {
        result =
            rdma ? try_upgrade_rdma(fd, first, n, channel) : try_upgrade(fd, first, n, channel);
    } catch (...) {
        fd_abandon_upgrade(fd);
        throw;
    }
    switch (result) {
        case UpgradeResult::Upgraded:
            if (fd_attach_channel(fd, *channel))
                return via_channel(fd);
            channel_release(*channel);  // fd closed concurrently: nothing left to serve
            errno = EBADF;
            return {RouteKind::Error, {}};
        case UpgradeResult::Plain:
            fd_abandon_upgrade(fd);
            return {RouteKind::Real, {}};
        case UpgradeResult::Failed:
            fd_abandon_upgrade(fd);
            return {RouteKind::Error, {}};
    }
    return {RouteKind::Real, {}};
}

// The first send on a candidate fd decides its fate (see upgrade.hpp).
Route decide_candidate(int fd, const iovec* iov, int iovcnt, bool rdma) {
    // Arguments the kernel refuses before it sends anything: the bare socket says so, and
    // the fd stays a candidate. A null piece the kernel would find only after sending the
    // pieces before it (part of a StartupMessage on the bare socket): EFAULT from us.
    if (iov_refusal(iov, iovcnt) != 0)
        return {RouteKind::Real, {}};
    if (null_piece(iov, iovcnt)) {
        errno = EFAULT;
        return {RouteKind::Error, {}};
    }
    if (!fd_claim_for_upgrade(fd))  // another thread's first send, dup() or close() was first
        return route_send(fd, iov, iovcnt);
    return upgrade_claimed(fd, iov, iovcnt, rdma);
}

Route route_send(int fd, const iovec* iov, int iovcnt) {
    switch (fd_lookup(fd).kind) {
        case FdKind::Untracked:
            return {RouteKind::Real, {}};
        case FdKind::Upgraded:
            return via_channel(fd);
        case FdKind::Forked:
            errno = EPIPE;
            return {RouteKind::Error, {}};
        case FdKind::Candidate:
            return decide_candidate(fd, iov, iovcnt, false);
        case FdKind::RdmaCandidate:
            return decide_candidate(fd, iov, iovcnt, true);
        case FdKind::Upgrading:
            if (!await_upgrade(fd))
                return {RouteKind::Error, {}};
            return route_send(fd, iov, iovcnt);
    }
    return {RouteKind::Real, {}};
}

Route route_recv(int fd) {
    switch (fd_lookup(fd).kind) {
        case FdKind::Untracked:
        case FdKind::Candidate:
        case FdKind::RdmaCandidate:
            return {RouteKind::Real, {}};
        case FdKind::Upgrading:
            if (!await_upgrade(fd))
                return {RouteKind::Error, {}};
            return route_recv(fd);
        case FdKind::Upgraded:
            return via_channel(fd);
        case FdKind::Forked:
            return {RouteKind::Eof, {}};
    }
    return {RouteKind::Real, {}};
}

// ---------------------------------------------------------------- flags the rings cannot carry
//
// An upgraded connection has no urgent data and no error queue, and the socket's peer is
// l5pgd's doorbell, not the application's: such calls get the answer the kernel gives on a
// socket where nothing of the kind is pending, never the stream's bytes.

// send(MSG_OOB): urgent data cannot travel through the rings; EOPNOTSUPP is what a socket
// family without it answers (AF_UNIX before Linux 5.15).
bool refuse_send_flags(int flags) {
    if ((flags & MSG_OOB) == 0)
        return false;
    errno = EOPNOTSUPP;
    return true;
}

// recv(MSG_OOB) with no urgent data is EINVAL (TCP and AF_UNIX alike); MSG_ERRQUEUE reads an
// empty error queue: EAGAIN (TCP; AF_UNIX would hand out stream bytes, which no caller
// asking for errors wants).
bool refuse_recv_flags(int flags) {
    if ((flags & (MSG_OOB | MSG_ERRQUEUE)) == 0)
        return false;
    errno = (flags & MSG_OOB) != 0 ? EINVAL : EAGAIN;
    return true;
}

// sendto()/sendmsg() with an address on the connected socket: the kernel decides as on the
// real socket, by a send of nothing to it (TCP ignores the address; AF_UNIX says EISCONN; a
// bad address is EFAULT or EINVAL on both). Only those answers count: the connection's own
// failures are the channel's to report.
bool refuse_address(int fd, const sockaddr* addr, socklen_t addrlen) {
    if (addr == nullptr && addrlen == 0)
        return false;
    if (real().sendto(fd, "", 0, MSG_DONTWAIT | MSG_NOSIGNAL, addr, addrlen) == 0)
        return false;
    return errno == EISCONN || errno == EFAULT || errno == EINVAL;
}

// recv(MSG_TRUNC) on TCP discards what it would have copied (tcp(7)): `buf` may well be
// null (channel_recv_discarding). AF_UNIX ignores the flag and copies.
bool discards_truncated(int fd, int flags) {
    if ((flags & MSG_TRUNC) == 0)
        return false;
    int domain = 0;
    socklen_t len = sizeof domain;
    return ::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 &&
           (domain == AF_INET || domain == AF_INET6);
}

template <class RealSend>
ssize_t route_send_iov(int fd, const iovec* iov, int iovcnt, int flags, bool nosignal,
                       RealSend real_send) {
    const Route route = route_send(fd, iov, iovcnt);
    switch (route.kind) {
        case RouteKind::Real:
            return real_send();
        case RouteKind::Channel:
            if (refused(iov_refusal(iov, iovcnt)) || refuse_send_flags(flags))
                return -1;
            if (null_piece(iov, iovcnt)) {
                errno = EFAULT;
                return -1;
            }
            return channel_send(*route.channel, fd, iov, iovcnt, flags, nosignal);
        case RouteKind::Eof:
        case RouteKind::Error:
            if (errno == EPIPE && !nosignal) {
                const int saved = errno;
                ::pthread_kill(::pthread_self(), SIGPIPE);
                errno = saved;
            }
            return -1;
    }
    return -1;
}

// read(2) and readv(2) of nothing return 0 at once on a socket (the kernel's sock_read_iter
// answers before it looks at the socket); recv(2) of nothing waits as any other read does
// (recv_nothing in channel.cpp).
enum class EmptyRead { Waits, ReturnsZero };

bool asks_nothing(const iovec* iov, int iovcnt) {
    for (int i = 0; i < iovcnt; ++i)
        if (iov[i].iov_len != 0)
            return false;
    return true;
}

template <class RealRecv>
ssize_t route_recv_iov(int fd, const iovec* iov, int iovcnt, int flags, RealRecv real_recv,
                       EmptyRead empty) {
    const Route route = route_recv(fd);
    switch (route.kind) {
        case RouteKind::Real:
            return real_recv();
        case RouteKind::Channel:
            if (refused(iov_refusal(iov, iovcnt)))
                return -1;
            if (empty == EmptyRead::ReturnsZero && asks_nothing(iov, iovcnt))
                return 0;
            if (refuse_recv_flags(flags))
                return -1;
            if (discards_truncated(fd, flags))
                return channel_recv_discarding(*route.channel, fd, iov_total(iov, iovcnt), flags);
            // (The kernel fails the copy only once there is data: at EOF it returns 0, and
            // with nothing to read EAGAIN or a wait. EFAULT at once instead of a crash.)
            if (null_piece(iov, iovcnt)) {
                errno = EFAULT;
                return -1;
            }
            return channel_recv(*route.channel, fd, iov, iovcnt, flags);
        case RouteKind::Eof:
            return 0;
        case RouteKind::Error:
            return -1;
    }
    return -1;
}

// The calls' one way in: no exception but pthread_cancel()'s unwinding leaves for the
// caller's C frames (c_boundary.hpp).
template <class RealSend>
ssize_t send_iov(int fd, const iovec* iov, int iovcnt, int flags, bool nosignal,
                 RealSend real_send) {
    return within_c_boundary(
        [&] { return route_send_iov(fd, iov, iovcnt, flags, nosignal, real_send); });
}

template <class RealRecv>
ssize_t recv_iov(int fd, const iovec* iov, int iovcnt, int flags, RealRecv real_recv,
                 EmptyRead empty = EmptyRead::Waits) {
    return within_c_boundary(
        [&] { return route_recv_iov(fd, iov, iovcnt, flags, real_recv, empty); });
}

}  // namespace
}  // namespace l5pg::shim

using namespace l5pg::shim;

extern "C" {

ssize_t send(int fd, const void* buf, size_t len, int flags) {
    iovec iov{const_cast<void*>(buf), len};
    return send_iov(fd, &iov, 1, flags, flags & MSG_NOSIGNAL,
                    [&] { return real().send(fd, buf, len, flags); });
}

ssize_t sendto(int fd, const void* buf, size_t len, int flags, const sockaddr* addr,
               socklen_t addrlen) {
    iovec iov{const_cast<void*>(buf), len};
    if (fd_lookup(fd).kind != FdKind::Untracked && refuse_address(fd, addr, addrlen))
        return -1;
    return send_iov(fd, &iov, 1, flags, flags & MSG_NOSIGNAL,
                    [&] { return real().sendto(fd, buf, len, flags, addr, addrlen); });
}

ssize_t sendmsg(int fd, const msghdr* msg, int flags) {
    if (msg == nullptr)
        return real().sendmsg(fd, msg, flags);  // EFAULT before the kernel looks at the socket
    if (too_many_pieces(fd, msg))
        return -1;
    if (fd_lookup(fd).kind == FdKind::Upgraded) {
        if (msg->msg_controllen > 0) {
            errno = EOPNOTSUPP;  // ancillary data cannot travel through the rings
            return -1;
        }
    }
    if (fd_lookup(fd).kind != FdKind::Untracked &&
        refuse_address(fd, static_cast<const sockaddr*>(msg->msg_name), msg->msg_namelen))
        return -1;
    return send_iov(fd, msg->msg_iov, static_cast<int>(msg->msg_iovlen), flags,
                    flags & MSG_NOSIGNAL, [&] { return real().sendmsg(fd, msg, flags); });
}

ssize_t write(int fd, const void* buf, size_t len) {
    iovec iov{const_cast<void*>(buf), len};
    return send_iov(fd, &iov, 1, 0, false, [&] { return real().write(fd, buf, len); });
}

ssize_t writev(int fd, const iovec* iov, int iovcnt) {
    return send_iov(fd, iov, iovcnt, 0, false, [&] { return real().writev(fd, iov, iovcnt); });
}

ssize_t recv(int fd, void* buf, size_t len, int flags) {
    iovec iov{buf, len};
    return recv_iov(fd, &iov, 1, flags, [&] { return real().recv(fd, buf, len, flags); });
}

// An upgraded connection names no address (TCP's recvfrom() names none; AF_UNIX's would name
// the server's socket, which nothing asks): the length is 0 after a call that read
// something, and untouched by a failing one or without an address.
ssize_t recvfrom(int fd, void* buf, size_t len, int flags, sockaddr* addr, socklen_t* addrlen) {
    iovec iov{buf, len};
    const bool upgraded = fd_lookup(fd).kind == FdKind::Upgraded;
    const ssize_t n = recv_iov(fd, &iov, 1, flags,
                               [&] { return real().recvfrom(fd, buf, len, flags, addr, addrlen); });
    if (upgraded && n >= 0 && addr != nullptr && addrlen != nullptr)
        *addrlen = 0;
    return n;
}

ssize_t recvmsg(int fd, msghdr* msg, int flags) {
    if (msg == nullptr)
        return real().recvmsg(fd, msg, flags);  // EFAULT before the kernel looks at the socket
    if (too_many_pieces(fd, msg))
        return -1;
    // As the kernel: no address, control data or flags after a call that read something; a
    // failing one leaves the header alone.
    const bool upgraded = fd_lookup(fd).kind == FdKind::Upgraded;
    const ssize_t n = recv_iov(fd, msg->msg_iov, static_cast<int>(msg->msg_iovlen), flags,
                               [&] { return real().recvmsg(fd, msg, flags); });
    if (upgraded && n >= 0) {
        msg->msg_namelen = 0;
        msg->msg_controllen = 0;
        msg->msg_flags = 0;
    }
    return n;
}

ssize_t read(int fd, void* buf, size_t len) {
    iovec iov{buf, len};
    return recv_iov(
        fd, &iov, 1, 0, [&] { return real().read(fd, buf, len); }, EmptyRead::ReturnsZero);
}

ssize_t readv(int fd, const iovec* iov, int iovcnt) {
    return recv_iov(
        fd, iov, iovcnt, 0, [&] { return real().readv(fd, iov, iovcnt); }, EmptyRead::ReturnsZero);
}

ssize_t __recv_chk(int fd, void* buf, size_t len, size_t buflen, int flags) {
    if (len > buflen)
        __chk_fail();
    return recv(fd, buf, len, flags);
}

ssize_t __recvfrom_chk(int fd, void* buf, size_t len, size_t buflen, int flags, sockaddr* addr,
                       socklen_t* addrlen) {
    if (len > buflen)
        __chk_fail();
    return recvfrom(fd, buf, len, flags, addr, addrlen);
}

ssize_t __read_chk(int fd, void* buf, size_t len, size_t buflen) {
    if (len > buflen)
        __chk_fail();
    return read(fd, buf, len);
}

}  // extern "C"
