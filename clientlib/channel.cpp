#include "clientlib/channel.hpp"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <utility>

#include "clientlib/cancellation_deferred.hpp"
#include "clientlib/channel_wait.hpp"
#include "clientlib/debug_log.hpp"
#include "clientlib/doorbell_relook.hpp"
#include "clientlib/fd_table.hpp"
#include "clientlib/foreign_waiters.hpp"
#include "clientlib/l5pg.h"
#include "clientlib/real_calls.hpp"
#include "clientlib/settings.hpp"
#include "clientlib/socket_timeout.hpp"
#include "transport/wait/doorbell.hpp"
#include "transport/wait/wait_id.hpp"

namespace l5pg::shim {

using transport::IoResult;
using transport::IoStatus;
using transport::Want;

namespace {

// The channels, never destroyed: at exit() another thread may still be in a call on one
// (a daemon thread polling for NOTIFY), and a static destructor would unmap its rings under
// it. The kernel takes the mappings back when the process ends. Zero at load time
// (constinit): no initialiser runs, which could wipe a channel that another library's
// constructor opened before ours ran, and the pages stay untouched until used.
union ChannelPool {
    constexpr ChannelPool() : channels() {}
    ~ChannelPool() {}  // channels' destructor never runs
    std::array<Channel, kMaxChannels> channels;
};
constinit ChannelPool g_channel_pool;
std::array<Channel, kMaxChannels>& g_pool = g_channel_pool.channels;

[[nodiscard]] bool would_block(const Channel& ch, int flags) {
    return (flags & MSG_DONTWAIT) != 0 || ch.nonblocking.load(std::memory_order_relaxed);
}

ssize_t fail(int err) {
    errno = err;
    return -1;
}

// The iovec piece holding byte `offset` onwards (empty once past the end).
std::span<std::byte> piece_at(const iovec* iov, int iovcnt, size_t offset) {
    for (int i = 0; i < iovcnt; ++i) {
        if (offset < iov[i].iov_len)
            return {static_cast<std::byte*>(iov[i].iov_base) + offset, iov[i].iov_len - offset};
        offset -= iov[i].iov_len;
    }
    return {};
}

// Says once (under L5PG_DEBUG) that the channel broke or l5pgd closed it.
// A number for the calling thread, unique among live threads: the address of its own
// thread-local byte.
thread_local char t_thread_byte;
uintptr_t thread_mark() {
    return reinterpret_cast<uintptr_t>(&t_thread_byte);
}

// An RDMA end remembers which thread last sent or received on it (the connection's user;
// a thread that only polls it is not: channel_prepare_for_foreign_wait()).
void note_user(Channel& ch) {
    if (ch.rdma)
        ch.last_user.store(thread_mark(), std::memory_order_relaxed);
}

void say_gone(Channel& ch, int fd, IoStatus status) {
    if (ch.said_gone)
        return;
    ch.said_gone = true;
    DebugLine line = debug_log();
    line.str("fd ").inum(fd);
    if (status == IoStatus::Error)
        line.str(": channel broken: ").str(ch.end->error());
    else
        line.str(": l5pgd closed the session");
    line.end();
}

// Arms the end's flag for an application that may wait for `want` in an epoll set we do
// not see, and re-checks (Dekker). True when the end turned out ready after all.
bool arm_for_foreign_waiter(Channel& ch, Want want) {
    if (!foreign_waiters_possible())
        return false;
    if (!ch.end->arm(want, wait::kUnnamedWait) || ch.end->ready(want)) {
        disarm_unless_others_wait(ch, want, 0);
        return true;
    }
    return false;
}

// After a read, also for another thread of the application still waiting on this
// connection: data this call left unread arrived when that thread's flag was taken
// (end_waiters.hpp). A send takes nothing from the receive ring: not after a send. The
// preparation reads doorbells from the socket and may write a poke: not if another thread
// closed the fd meanwhile, whose number may name another file by now.
void prepare_return(Channel& ch, int fd, bool after_read) {
    if (!foreign_waiters_possible() && !(after_read && others_wait(ch, Want::Read)))
        return;
    if (fd_lookup(fd).channel == &ch)
        ch.end->prepare_for_foreign_wait(fd, others_wait(ch, Want::Write));
}

// A blocking wait until the end is ready for `want`, as a wait::Waiter: the end's flag,
// and the application's own poll() on the session socket (doorbells, EOF), for at most the
// socket's timeout (EAGAIN).
class EndWaiter {
  public:
    EndWaiter(Channel& ch, int fd, Want want, SocketTimeout& timeout)
        : ch_(ch), fd_(fd), want_(want), timeout_(timeout) {}
    ~EndWaiter() { stop_waiting(ch_, counted_); }
    EndWaiter(const EndWaiter&) = delete;
    EndWaiter& operator=(const EndWaiter&) = delete;

    bool ready() { return ch_.end->ready(want_); }
    // A round after a look without a doorbell (or a nap) arms at once: spinning then would
    // only burn the CPU, and lengthen the instants a signal finds no EINTR to give. Spinning
    // and yielding never outlast the socket's timeout.
    wait::WaitPolicy policy() {
        if (std::exchange(looked_, false))
            return wait::WaitPolicy::none();
        const wait::WaitPolicy budget = channel_wait_budget(ch_, true);
        if (budget.total() == std::chrono::nanoseconds::zero())
            return budget;
        const auto left = timeout_.left();
        return left ? budget.within(*left) : budget;
    }
    bool arm() { return arm_as_waiter(ch_, want_, wait::kUnnamedWait, counted_); }
    void disarm() { disarm_unless_others_wait(ch_, want_, counted_); }
    wait::Woken sleep() {
        int ms = timeout_.poll_ms();
        if (may_miss_doorbell(counted_))
            ms = relook_.cut(ms);  // once passed, a round looks at the ring
        pollfd p{fd_, POLLIN, 0};
        const int rc = ms == 0 ? 0 : real().poll(&p, 1, ms);
        if (rc < 0)
            return wait::Woken::Stop;
        if (rc == 0 && timeout_.poll_ms() == 0) {
            if (ready())  // a last look, as the kernel's after its timeout
                return wait::Woken::Look;
            errno = EAGAIN;
            return wait::Woken::Stop;
        }
        looked_ = rc == 0;
        if (rc == 0)
            return wait::Woken::Again;
        if (p.revents & POLLNVAL) {
            // Another thread closed the fd: no doorbell can reach us, but as on a socket the
            // call waits on for its answer, looking at the ring every millisecond.
            pause_keeping_errno(1'000'000);
            return wait::Woken::Again;
        }
        if (channel_drain_for_waiter(ch_, fd_, p.revents, counted_))
            return wait::Woken::Again;  // EOF makes the end ready (it reports Closed)
        // Left on the socket for another thread. Not ready ourselves, we nap (our poll()
        // would return at once) until that thread has drained it.
        looked_ = true;
        return ready() ? wait::Woken::Again : nap();
    }

  private:
    // A signal ends the nap as it would end the poll(): the call fails with EINTR.
    wait::Woken nap() {
        const int ms = relook_.cut(timeout_.poll_ms());
        const timespec pause{0, ms * 1'000'000L};
        if (ms > 0 && ::nanosleep(&pause, nullptr) != 0)
            return wait::Woken::Stop;
        return wait::Woken::Again;
    }

    Channel& ch_;
    int fd_;
    Want want_;
    SocketTimeout& timeout_;
    CountedWants counted_ = 0;
    DoorbellRelook relook_;
    bool looked_ = false;  // the last round looked at the ring, no doorbell came
};

// False with errno set when poll() failed (see channel_wait()), or EAGAIN when the socket's
// timeout for this call passed.
bool wait_for(Channel& ch, int fd, Want want, SocketTimeout& timeout) {
    EndWaiter waiter(ch, fd, want, timeout);
    return channel_wait(ch, waiter);
}

// recv(2) of zero bytes on a stream socket: 0 once there is something to read or the peer
// has left (the bytes stay), ECONNRESET on a broken connection, and on an empty socket what
// any recv() does there: EAGAIN when it must not block, else a wait.
ssize_t recv_nothing(Channel& ch, int fd, int flags) {
    SocketTimeout timeout(fd, Want::Read);
    while (!ch.end->ready(Want::Read)) {
        if (would_block(ch, flags))
            return fail(EAGAIN);
        if (!wait_for(ch, fd, Want::Read, timeout))
            return -1;
    }
    if (ch.end->broken())
        return fail(ECONNRESET);
    prepare_return(ch, fd, true);  // the wait drained the doorbell a foreign poller may look for
    return 0;
}

}  // namespace

wait::WaitPolicy channel_wait_budget(Channel& ch, bool only_session) {
    return ch.end->wait_policy(ch.spin, settings().budget, only_session);
}

// ---------------------------------------------------------------- pool

namespace {

// Claims a free pool slot and resets it; the caller puts its end in and then publishes
// the slot (publish()).
Channel* claim_slot(bool nonblocking) {
    for (Channel& ch : g_pool) {
        uint32_t expected = 0;
        if (!ch.in_use.compare_exchange_strong(expected, 1, std::memory_order_acq_rel))
            continue;
        ch.nonblocking.store(nonblocking, std::memory_order_relaxed);
        ch.said_gone = false;
        ch.spin.reset();
        for (std::atomic<uint32_t>& waiters : ch.waiters)
            waiters.store(0, std::memory_order_relaxed);
        ch.end = nullptr;
        return &ch;
    }
    return nullptr;
}

Channel* publish(Channel& ch, transport::ChannelEnd& end, int transport) {
    ch.end = &end;
    ch.transport = transport;
    ch.refs.store(1, std::memory_order_release);
    return &ch;
}

void free_slot(Channel& ch) {
    ch.end = nullptr;
    ch.shm.reset();
    ch.rdma.reset();
    ch.in_use.store(0, std::memory_order_release);
}

}  // namespace

Channel* channel_acquire(shm::Segment segment, bool nonblocking) {
    Channel* ch = claim_slot(nonblocking);
    if (ch == nullptr)
        return nullptr;
    return publish(*ch, ch->shm.emplace(std::move(segment)), L5PG_TRANSPORT_SHM);
}

Channel* channel_acquire_rdma(std::unique_ptr<rdma::ClientChannel>& rdma, bool nonblocking) {
    Channel* ch = claim_slot(nonblocking);
    if (ch == nullptr)
        return nullptr;
    ch->last_user.store(thread_mark(), std::memory_order_relaxed);  // the upgrading thread
    return publish(*ch, ch->rdma.emplace(std::move(rdma)), L5PG_TRANSPORT_RDMA);
}

Channel* channel_acquire_end(transport::ChannelEnd& end, int transport, bool nonblocking) {
    Channel* ch = claim_slot(nonblocking);
    if (ch == nullptr)
        return nullptr;
    return publish(*ch, end, transport);
}

Channel* channel_at(uint32_t index) {
    return index < kMaxChannels ? &g_pool[index] : nullptr;
}

uint32_t channel_index(const Channel& channel) {
    return static_cast<uint32_t>(&channel - g_pool.data());
}

// Acquire on success: the holder then sees the end as the one who published it left it.
bool channel_try_add_ref(Channel& channel) {
    uint32_t refs = channel.refs.load(std::memory_order_relaxed);
    while (refs != 0)
        if (channel.refs.compare_exchange_weak(refs, refs + 1, std::memory_order_acquire,
                                               std::memory_order_relaxed))
            return true;
    return false;
}

// Before the last close of an upgraded socket: closing a socket with unread bytes in it
// (l5pgd's doorbells) makes the kernel report ECONNRESET to l5pgd instead of EOF (a TCP
// socket sends a reset). l5pgd forwards what we published either way (issue 20), but
// leave nothing that resets: shut both directions, so no further doorbell can arrive on
// a Unix socket, then drain what did. l5pgd sees EOF.
namespace {
void quiesce_socket(int fd) {
    (void)::shutdown(fd, SHUT_RDWR);
    size_t count = 0;
    (void)wait::drain_doorbells(fd, count);
}
}  // namespace

// The last reference goes inside the caller's libc call (close(), dup2(), a recv() whose fd
// was closed meanwhile), which must leave errno as it would: the teardown (quiescing,
// unmapping, an RDMA queue pair's) does not change it.
void channel_release(Channel& ch, int closing_fd) {
    if (ch.refs.fetch_sub(1, std::memory_order_acq_rel) != 1)
        return;
    const CancellationDeferred teardown;  // runs to its end: the slot is freed
    const int saved = errno;
    ch.end->close_by_application();
    if (closing_fd >= 0)
        quiesce_socket(closing_fd);
    free_slot(ch);
    errno = saved;
}

void pause_keeping_errno(long nanoseconds) {
    const timespec pause{0, nanoseconds};
    const int saved = errno;  // a signal's EINTR is not the caller's answer
    ::nanosleep(&pause, nullptr);
    errno = saved;
}

void channel_forget_all_after_fork() {
    for (Channel& ch : g_pool) {
        if (ch.in_use.load(std::memory_order_relaxed) == 0)
            continue;
        if (ch.end != nullptr)
            ch.end->forget_after_fork();
        ch.refs.store(0, std::memory_order_relaxed);
        free_slot(ch);
    }
}

// ---------------------------------------------------------------- I/O

size_t iov_total(const iovec* iov, int iovcnt) {
    size_t total = 0;
    for (int i = 0; i < iovcnt; ++i)
        total += iov[i].iov_len;
    return total;
}

ssize_t channel_send(Channel& ch, int fd, const iovec* iov, int iovcnt, int flags, bool nosignal) {
    note_user(ch);
    const size_t total = iov_total(iov, iovcnt);
    size_t sent = 0;
    SocketTimeout timeout(fd, Want::Write);
    for (;;) {
        const IoResult r = ch.end->write(fd, piece_at(iov, iovcnt, sent));
        sent += r.bytes;
        if (r.status == IoStatus::Ok) {
            if (sent == total)
                break;
            continue;
        }
        if (r.status == IoStatus::Closed || r.status == IoStatus::Error) {
            if (sent > 0)
                break;  // report what went through; the next call reports the failure
            say_gone(ch, fd, r.status);
            // Like a socket: EPIPE (with SIGPIPE unless MSG_NOSIGNAL) once the peer closed,
            // ECONNRESET when the connection broke.
            if (r.status == IoStatus::Closed && !nosignal)
                ::pthread_kill(::pthread_self(), SIGPIPE);
            return fail(r.status == IoStatus::Closed ? EPIPE : ECONNRESET);
        }
        // WouldBlock: the ring towards l5pgd is full.
        if (would_block(ch, flags)) {
            if (sent > 0)
                break;
            if (arm_for_foreign_waiter(ch, Want::Write))
                continue;
            return fail(EAGAIN);
        }
        if (!wait_for(ch, fd, Want::Write, timeout))
            return sent > 0 ? static_cast<ssize_t>(sent) : -1;
    }
    prepare_return(ch, fd, false);
    return static_cast<ssize_t>(sent);
}

namespace {

// Where a recv() puts what it reads: the caller's pieces, or, for recv(MSG_TRUNC) on a
// TCP-born connection, nowhere: `total` bytes read again and again into one scratch buffer.
struct RecvTarget {
    const iovec* iov = nullptr;
    int iovcnt = 0;
    size_t total = 0;
    std::span<std::byte> scratch;  // non-empty: discard

    // Where byte `got` onwards goes (empty once `total` are in).
    [[nodiscard]] std::span<std::byte> piece_at(size_t got) const {
        if (scratch.empty())
            return l5pg::shim::piece_at(iov, iovcnt, got);
        return scratch.first(std::min(scratch.size(), total - got));
    }
};

// Reads (or with MSG_PEEK copies without consuming) what the end has into `to` from byte
// `got` on, until it is full or the end has no more now. The last call's status. (A peek
// starts again from the first unread byte each call, hence `got` as what to skip.)
IoResult fill_from_end(Channel& ch, int fd, const RecvTarget& to, bool peek, size_t& got) {
    IoResult r{0, IoStatus::Ok};
    for (;;) {
        const std::span<std::byte> piece = to.piece_at(got);
        if (piece.empty())
            return r;
        r = peek ? ch.end->peek(piece, got) : ch.end->read(fd, piece);
        got += r.bytes;
        if (r.bytes == 0 || r.status != IoStatus::Ok)
            return r;
    }
}

ssize_t recv_into(Channel& ch, int fd, const RecvTarget& to, int flags) {
    note_user(ch);
    const bool peek = (flags & MSG_PEEK) != 0;
    if (peek && !ch.end->can_peek())
        return fail(EOPNOTSUPP);
    const size_t total = to.total;
    const bool wait_all = (flags & MSG_WAITALL) != 0 && !would_block(ch, flags) && !peek;
    if (total == 0)
        return recv_nothing(ch, fd, flags);
    size_t got = 0;
    SocketTimeout timeout(fd, Want::Read);
    for (;;) {
        const IoResult r = fill_from_end(ch, fd, to, peek, got);
        if (got == total || (got > 0 && !wait_all))
            break;
        if (r.status == IoStatus::Closed) {
            say_gone(ch, fd, r.status);
            break;  // EOF (or the partial MSG_WAITALL result)
        }
        if (r.status == IoStatus::Error) {
            say_gone(ch, fd, r.status);
            return got > 0 ? static_cast<ssize_t>(got) : fail(ECONNRESET);
        }
        if (would_block(ch, flags)) {
            // A level-triggered epoll user must not find stale doorbell bytes on the
            // socket, so drain them here. Interposed pollers need no drain (a stale byte
            // costs them one extra round, and they drain after blocking), and libpq
            // calls recv() on an empty ring once per response: the drain would be a
            // system call on every round trip. (An l5pgd that died without saying so is
            // then noticed by the next poll: the socket's EOF.)
            if (foreign_waiters_possible()) {
                ch.end->on_socket_readable(fd);
                if (ch.end->ready(Want::Read) || arm_for_foreign_waiter(ch, Want::Read))
                    continue;
            }
            if (got > 0)
                break;
            return fail(EAGAIN);
        }
        if (!wait_for(ch, fd, Want::Read, timeout))
            return got > 0 ? static_cast<ssize_t>(got) : -1;
    }
    prepare_return(ch, fd, true);
    return static_cast<ssize_t>(got);
}

}  // namespace

size_t channel_unread_bytes(Channel& ch) {
    if (ch.rdma && ch.last_user.load(std::memory_order_relaxed) != thread_mark())
        return 0;
    return ch.end->unread_bytes();
}

ssize_t channel_recv(Channel& ch, int fd, const iovec* iov, int iovcnt, int flags) {
    return recv_into(ch, fd, {iov, iovcnt, iov_total(iov, iovcnt), {}}, flags);
}

ssize_t channel_recv_discarding(Channel& ch, int fd, size_t len, int flags) {
    std::byte scratch[4096];
    return recv_into(ch, fd, {nullptr, 0, len, scratch}, flags);
}

// ---------------------------------------------------------------- poll support

// Called from a thread that may not be the one using the connection (foreign_waiters.cpp,
// when epoll_ctl() first sees a socket that may be ours). An SHM end's state is atomics in
// shared memory. An RDMA end's (its queue pair and completion queues) is not thread-safe:
// prepared here only by the thread that used it last (the program's single thread, or the
// one that registers its own connection); another thread's is left to that thread, which
// prepares it at the next return of a call on it (prepare_return()). Until then an epoll
// waiter may miss what arrives: RDMA connections are not made once epoll is in use
// (upgrade_rdma.cpp), and the README names this for those made before.
void channel_prepare_for_foreign_wait(Channel& ch, int fd) {
    if (!ch.rdma || ch.last_user.load(std::memory_order_relaxed) == thread_mark())
        ch.end->prepare_for_foreign_wait(fd, others_wait(ch, Want::Write));
}

short channel_revents(Channel& ch, short events) {
    short revents = 0;
    if ((events & kPollReadable) && ch.end->ready(Want::Read))
        revents |= events & kPollReadable;
    if ((events & kPollWritable) && ch.end->ready(Want::Write))
        revents |= events & kPollWritable;
    if (ch.end->broken())
        revents |= POLLERR;
    if (ch.end->hung_up())
        revents |= POLLHUP | (events & POLLRDHUP);
    return revents;
}

// False from arm() means ready already (or broken): the caller's re-check sees it.
void channel_arm(Channel& ch, short events, uint64_t wait_id, CountedWants& counted) {
    if (events & kPollReadable)
        (void)arm_as_waiter(ch, Want::Read, wait_id, counted);
    if (events & kPollWritable)
        (void)arm_as_waiter(ch, Want::Write, wait_id, counted);
}

void channel_disarm(Channel& ch, short events, CountedWants counted) {
    if (events & kPollReadable)
        disarm_unless_others_wait(ch, Want::Read, counted);
    if (events & kPollWritable)
        disarm_unless_others_wait(ch, Want::Write, counted);
}

bool channel_drain_for_waiter(Channel& ch, int fd, short revents, CountedWants counted) {
    if ((revents & (POLLHUP | POLLERR)) == 0 && doorbell_owed_to_others(ch, counted))
        return false;
    ch.end->on_socket_readable(fd);
    // No poke written through a number that another thread closed meanwhile: it may name
    // another file now.
    if (fd_lookup(fd).channel == &ch)
        ring_again_for_others(ch, fd, counted);
    return true;
}

}  // namespace l5pg::shim
