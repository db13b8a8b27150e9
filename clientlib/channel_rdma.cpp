// Byte-stream semantics of an upgraded socket over the L5 RDMA channel. The channel
// (transport/rdma/channel/client.hpp) does the RDMA; this file maps it onto what
// send/recv/poll promise: partial transfers, EAGAIN for non-blocking sockets, blocking
// (spin, yield, arm the wait flag, then poll() the socket for a doorbell), EOF, EPIPE.
//
// Not done yet for RDMA (see docs/wire-format.md section 5): the SHM channel's "poke",
// which keeps the socket readable while received data sits unread, for applications that
// wait in their own epoll (psycopg 3, asyncio). They would get the wait flag armed before
// each return (prepare_return: the next response rings the doorbell) but no doorbell for
// data that landed meanwhile, and could hang; so try_upgrade_rdma() leaves connections of
// a process that uses epoll on TCP. poll()/select() users (libpq, psql, pgbench, psycopg2)
// are not affected.
#include "clientlib/channel_rdma.hpp"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <cerrno>

#include "clientlib/channel_wait.hpp"
#include "clientlib/debug_log.hpp"
#include "clientlib/foreign_waiters.hpp"
#include "clientlib/real_calls.hpp"
#include "transport/rdma/channel/client.hpp"

namespace l5pg::shim {
namespace {

[[nodiscard]] bool would_block(const Channel& ch, int flags) noexcept {
    return (flags & MSG_DONTWAIT) != 0 || ch.nonblocking.load(std::memory_order_relaxed);
}

ssize_t fail(int err) noexcept {
    errno = err;
    return -1;
}

size_t iov_total(const iovec* iov, int iovcnt) noexcept {
    size_t total = 0;
    for (int i = 0; i < iovcnt; ++i)
        total += iov[i].iov_len;
    return total;
}

// The iovec piece holding byte `offset` onwards (empty once past the end).
std::span<std::byte> piece_at(const iovec* iov, int iovcnt, size_t offset) noexcept {
    for (int i = 0; i < iovcnt; ++i) {
        if (offset < iov[i].iov_len)
            return {static_cast<std::byte*>(iov[i].iov_base) + offset, iov[i].iov_len - offset};
        offset -= iov[i].iov_len;
    }
    return {};
}

// Blocking until the channel is readable (writable), as a wait::Waiter: our wait flag
// lives in l5pgd's memory (arm_*() WRITE it and re-check once the WRITE completed), and we
// sleep in the application's own poll() on the session socket until a doorbell or EOF.
class RdmaWaiter {
  public:
    RdmaWaiter(Channel& ch, int fd, bool for_write) noexcept
        : ch_(ch), c_(*ch.rdma), fd_(fd), for_write_(for_write) {}

    bool ready() noexcept { return for_write_ ? c_.writable() : c_.readable(); }
    wait::WaitPolicy policy() noexcept { return channel_wait_budget(ch_, true); }
    bool arm() noexcept { return for_write_ ? c_.arm_write() : c_.arm_read(); }
    void disarm() noexcept {}  // see channel_disarm()
    wait::Woken sleep() noexcept {
        pollfd p{fd_, POLLIN, 0};
        if (real().poll(&p, 1, -1) < 0)
            return wait::Woken::Stop;
        c_.on_socket_readable();
        return wait::Woken::Again;
    }

  private:
    Channel& ch_;
    rdma::ClientChannel& c_;
    int fd_;
    bool for_write_;
};

// False with errno set when poll() failed (see channel_wait()).
bool wait_for(Channel& ch, int fd, bool for_write) noexcept {
    RdmaWaiter waiter(ch, fd, for_write);
    return channel_wait(ch, waiter);
}

// Says once (under L5PG_DEBUG) why the channel broke.
void report(Channel& ch, int fd) noexcept {
    if (ch.broken)
        return;
    ch.broken = true;
    debug_log()
        .str("fd ")
        .inum(fd)
        .str(": RDMA channel broken: ")
        .str(ch.rdma->error().c_str())
        .end();
}

// An epoll user only wakes for bytes on the socket: arm the flag so that l5pgd rings
// when it next publishes (see the note at the top about data already received).
void prepare_return(Channel& ch) noexcept {
    if (!foreign_waiters_possible())
        return;
    rdma::ClientChannel& c = *ch.rdma;
    if (!c.readable())
        (void)c.arm_read();
}

}  // namespace

ssize_t rdma_send(Channel& ch, int fd, const iovec* iov, int iovcnt, int flags,
                  bool nosignal) noexcept {
    rdma::ClientChannel& c = *ch.rdma;
    const size_t total = iov_total(iov, iovcnt);
    size_t sent = 0;
    for (;;) {
        rdma::IoResult r{0, rdma::IoStatus::Ok};
        if (total == 0) {
            // Like a socket: a zero-length send succeeds unless the connection is gone.
            if (c.broken() || c.peer_closed())
                r.status = c.peer_closed() ? rdma::IoStatus::Closed : rdma::IoStatus::Error;
            else
                return 0;
        } else {
            r = c.write(piece_at(iov, iovcnt, sent));
            sent += r.bytes;
            if (sent == total)
                break;
        }
        if (r.status == rdma::IoStatus::Ok)
            continue;
        if (r.status == rdma::IoStatus::Closed || r.status == rdma::IoStatus::Error) {
            if (sent > 0)
                break;  // report what went through; the next call reports the failure
            if (r.status == rdma::IoStatus::Error)
                report(ch, fd);
            if (r.status == rdma::IoStatus::Closed && !nosignal)
                ::pthread_kill(::pthread_self(), SIGPIPE);
            return fail(r.status == rdma::IoStatus::Closed ? EPIPE : ECONNRESET);
        }
        // WouldBlock: the ring in l5pgd's memory is full.
        if (would_block(ch, flags)) {
            if (sent > 0)
                break;
            return fail(EAGAIN);
        }
        if (!wait_for(ch, fd, true))
            return sent > 0 ? static_cast<ssize_t>(sent) : -1;
    }
    prepare_return(ch);
    return static_cast<ssize_t>(sent);
}

ssize_t rdma_recv(Channel& ch, int fd, const iovec* iov, int iovcnt, int flags) noexcept {
    if ((flags & MSG_PEEK) != 0)
        return fail(EOPNOTSUPP);  // the channel consumes what it reads
    rdma::ClientChannel& c = *ch.rdma;
    const size_t total = iov_total(iov, iovcnt);
    const bool wait_all = (flags & MSG_WAITALL) != 0 && !would_block(ch, flags);
    if (total == 0)
        return 0;
    size_t got = 0;
    for (;;) {
        rdma::IoResult r{0, rdma::IoStatus::Ok};
        while (got < total) {
            r = c.read(piece_at(iov, iovcnt, got));
            got += r.bytes;
            if (r.bytes == 0 || r.status != rdma::IoStatus::Ok)
                break;
        }
        if (got == total || (got > 0 && !wait_all))
            break;
        if (r.status == rdma::IoStatus::Closed) {
            if (!ch.peer_closed)
                debug_log()
                    .str("fd ")
                    .inum(fd)
                    .str(": l5pgd closed the RDMA session (errno ")
                    .inum(errno)
                    .str(", doorbells ")
                    .num(c.stats().doorbells_received)
                    .str(")")
                    .end();
            ch.peer_closed = true;
            break;  // EOF (or the partial MSG_WAITALL result)
        }
        if (r.status == rdma::IoStatus::Error) {
            report(ch, fd);
            return got > 0 ? static_cast<ssize_t>(got) : fail(ECONNRESET);
        }
        if (would_block(ch, flags)) {
            c.on_socket_readable();  // a level-triggered poller must not see stale bytes
            if (c.readable())
                continue;
            if (got > 0)
                break;
            prepare_return(ch);
            if (c.readable())
                continue;
            return fail(EAGAIN);
        }
        if (!wait_for(ch, fd, false))
            return got > 0 ? static_cast<ssize_t>(got) : -1;
    }
    prepare_return(ch);
    return static_cast<ssize_t>(got);
}

short rdma_revents(Channel& ch, short events) noexcept {
    rdma::ClientChannel& c = *ch.rdma;
    short revents = 0;
    if ((events & POLLIN) && c.readable())
        revents |= POLLIN;
    if ((events & POLLOUT) && c.writable())
        revents |= POLLOUT;
    if (c.broken() && !c.peer_closed())
        revents |= POLLERR;
    if (c.peer_closed())
        revents |= POLLHUP;
    return revents;
}

void rdma_arm(Channel& ch, short events) noexcept {
    rdma::ClientChannel& c = *ch.rdma;
    // False means ready already (or broken): the caller's re-check sees it.
    if (events & POLLIN)
        (void)c.arm_read();
    if (events & POLLOUT)
        (void)c.arm_write();
}

void rdma_drain(Channel& ch) noexcept {
    ch.rdma->on_socket_readable();
}

void rdma_prepare_for_foreign_wait(Channel& ch) noexcept {
    prepare_return(ch);
}

void rdma_destroy(Channel& ch) noexcept {
    delete ch.rdma;  // destroys the queue pair (joins a soft device thread, closes its wire)
    ch.rdma = nullptr;
}

}  // namespace l5pg::shim
