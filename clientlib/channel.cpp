#include "clientlib/channel.hpp"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "clientlib/channel_rdma.hpp"
#include "clientlib/channel_wait.hpp"
#include "clientlib/debug_log.hpp"
#include "clientlib/foreign_waiters.hpp"
#include "clientlib/real_calls.hpp"
#include "clientlib/settings.hpp"
#include "transport/wait/cpu_hint.hpp"
#include "transport/wait/doorbell.hpp"
#include "transport/wait/session_policy.hpp"

namespace l5pg::shim {
namespace {

std::array<Channel, kMaxChannels> g_pool;
// Process-wide: the threads of a client program rarely differ in affinity, and it is a hint.
wait::SoleCpuHint g_sole_cpu;

[[nodiscard]] bool would_block(const Channel& ch, int flags) noexcept {
    return (flags & MSG_DONTWAIT) != 0 || ch.nonblocking.load(std::memory_order_relaxed);
}

[[nodiscard]] bool server_closed(const Channel& ch) noexcept {
    return ch.segment->header().server_closed.load(std::memory_order_acquire) != 0;
}

[[nodiscard]] bool cannot_send(const Channel& ch) noexcept {
    return ch.broken || ch.peer_closed || server_closed(ch);
}

void mark_broken(Channel& ch, const char* what) noexcept {
    if (!ch.broken)
        debug_log().str("shared memory protocol violation: ").str(what).end();
    ch.broken = true;
}

void drain_socket(Channel& ch, int fd) noexcept {
    size_t count = 0;
    const int saved = errno;
    if (wait::drain_doorbells(fd, count) == wait::DrainResult::PeerClosed)
        ch.peer_closed = true;
    if (count > 0)
        ch.poke_outstanding = false;
    errno = saved;
}

// Establishes the readiness invariant (see channel.hpp) before returning to the app,
// when it may wait in an epoll set (foreign_waiters.hpp).
void prepare_return(Channel& ch, int fd) noexcept {
    if (ch.broken || ch.peer_closed || !foreign_waiters_possible())
        return;
    if (!ch.rx.has_data()) {
        ch.rx.arm();
        if (!ch.rx.has_data())
            return;  // Dekker re-check: the flag covers what comes next
    }
    if (ch.poke_outstanding)
        return;
    ch.rx.arm();
    if (!wait::ring_doorbell(fd))
        ch.peer_closed = true;
    ch.poke_outstanding = true;
}

// A blocking wait for ring space (for_write) or data, as a wait::Waiter: the rings' flags,
// and the application's own poll() on the session socket, where EOF ends the wait.
template <class Ready>
class ShmWaiter {
  public:
    ShmWaiter(Channel& ch, int fd, bool for_write, Ready ready) noexcept
        : ch_(ch), fd_(fd), for_write_(for_write), ready_(ready) {}

    bool ready() noexcept { return ready_(); }
    wait::WaitPolicy policy() noexcept { return channel_wait_budget(ch_, true); }
    bool arm() noexcept {
        if (for_write_)
            ch_.tx.arm();
        else
            ch_.rx.arm();
        return true;
    }
    void disarm() noexcept { channel_disarm(ch_, for_write_ ? POLLOUT : POLLIN); }
    wait::Woken sleep() noexcept {
        pollfd p{fd_, POLLIN, 0};
        if (real().poll(&p, 1, -1) < 0)
            return wait::Woken::Stop;
        drain_socket(ch_, fd_);
        return ch_.peer_closed ? wait::Woken::Look : wait::Woken::Again;
    }

  private:
    Channel& ch_;
    int fd_;
    bool for_write_;
    Ready ready_;
};

template <class Ready>
bool wait_until(Channel& ch, int fd, bool for_write, Ready ready) noexcept {
    ShmWaiter<Ready> waiter(ch, fd, for_write, ready);
    return channel_wait(ch, waiter);
}

size_t iov_total(const iovec* iov, int iovcnt) noexcept {
    size_t total = 0;
    for (int i = 0; i < iovcnt; ++i)
        total += iov[i].iov_len;
    return total;
}

// Calls `fn(base, len)` for the bytes of `iov` from offset `skip` on, one iovec piece
// at a time, until `fn` handles less than it was given. Returns the bytes handled.
template <class Fn>
size_t for_each_iov_from(const iovec* iov, int iovcnt, size_t skip, Fn fn) noexcept {
    size_t done = 0;
    for (int i = 0; i < iovcnt; ++i) {
        if (skip >= iov[i].iov_len) {
            skip -= iov[i].iov_len;
            continue;
        }
        auto* base = static_cast<std::byte*>(iov[i].iov_base) + skip;
        const size_t len = iov[i].iov_len - skip;
        skip = 0;
        const size_t n = fn(base, len);
        done += n;
        if (n < len)
            break;
    }
    return done;
}

size_t copy_into_ring(Channel& ch, const iovec* iov, int iovcnt, size_t skip,
                      shm::RingStatus& status) noexcept {
    status = shm::RingStatus::Ok;
    return for_each_iov_from(iov, iovcnt, skip, [&](std::byte* base, size_t len) {
        return status == shm::RingStatus::Ok ? ch.tx.write({base, len}, status) : 0;
    });
}

size_t copy_from_ring(Channel& ch, const iovec* iov, int iovcnt, size_t skip, bool peek,
                      shm::RingStatus& status) noexcept {
    status = shm::RingStatus::Ok;
    if (peek) {  // MSG_PEEK: the rest of the current record, nothing consumed
        std::span<const std::byte> data;
        status = ch.rx.peek(data);
        if (status != shm::RingStatus::Ok || iovcnt == 0)
            return 0;
        const size_t n = std::min(data.size(), iov[0].iov_len);
        std::memcpy(iov[0].iov_base, data.data(), n);
        return n;
    }
    const size_t copied = for_each_iov_from(iov, iovcnt, skip, [&](std::byte* base, size_t len) {
        return status == shm::RingStatus::Ok ? ch.rx.read({base, len}, status) : 0;
    });
    if (status == shm::RingStatus::Empty)
        status = shm::RingStatus::Ok;
    return copied;
}

ssize_t fail(int err) noexcept {
    errno = err;
    return -1;
}

}  // namespace

wait::WaitPolicy channel_wait_budget(Channel& ch, bool only_session) noexcept {
    if (ch.kind == ChannelKind::Shm) {
        shm::Header& header = ch.segment->header();
        return wait::session_wait_policy(
            {g_sole_cpu, header.client_sole_cpu, header.server_sole_cpu}, only_session, ch.spin,
            settings().budget);
    }
    return ch.spin.budget(settings().budget);
}

// ---------------------------------------------------------------- pool

namespace {

// Claims a free pool slot and resets what both kinds share; the caller fills in its kind's
// end and then publishes the slot (publish()).
Channel* claim_slot(ChannelKind kind, bool nonblocking) noexcept {
    for (Channel& ch : g_pool) {
        uint32_t expected = 0;
        if (!ch.in_use.compare_exchange_strong(expected, 1, std::memory_order_acq_rel))
            continue;
        ch.nonblocking.store(nonblocking, std::memory_order_relaxed);
        ch.peer_closed = ch.broken = ch.poke_outstanding = false;
        ch.spin.reset();
        ch.kind = kind;
        ch.segment.reset();
        ch.rdma = nullptr;
        return &ch;
    }
    return nullptr;
}

Channel* publish(Channel& ch) noexcept {
    ch.refs.store(1, std::memory_order_release);
    return &ch;
}

}  // namespace

Channel* channel_acquire(shm::Segment segment, bool nonblocking) noexcept {
    Channel* ch = claim_slot(ChannelKind::Shm, nonblocking);
    if (ch == nullptr)
        return nullptr;
    ch->segment.emplace(std::move(segment));
    shm::Header& h = ch->segment->header();
    ch->tx = shm::RingWriter(h.c2s, ch->segment->c2s_data(), ch->segment->c2s_size());
    ch->rx = shm::RingReader(h.s2c, ch->segment->s2c_data(), ch->segment->s2c_size());
    return publish(*ch);
}

Channel* channel_acquire_rdma(rdma::ClientChannel* rdma, bool nonblocking) noexcept {
    Channel* ch = claim_slot(ChannelKind::Rdma, nonblocking);
    if (ch == nullptr)
        return nullptr;
    ch->rdma = rdma;
    return publish(*ch);
}

Channel* channel_at(uint32_t index) noexcept {
    return index < kMaxChannels ? &g_pool[index] : nullptr;
}

uint32_t channel_index(const Channel& channel) noexcept {
    return static_cast<uint32_t>(&channel - g_pool.data());
}

void channel_add_ref(Channel& channel) noexcept {
    channel.refs.fetch_add(1, std::memory_order_relaxed);
}

// Before the last close of an upgraded socket: closing a socket with unread bytes in it
// (l5pgd's doorbells) makes the kernel report ECONNRESET to l5pgd instead of EOF (a TCP
// socket sends a reset). l5pgd forwards what we published either way (issue 20), but
// leave nothing that resets: shut both directions, so no further doorbell can arrive on
// a Unix socket, then drain what did. l5pgd sees EOF. errno is the caller's afterwards.
namespace {
void quiesce_socket(int fd) noexcept {
    const int saved = errno;
    (void)::shutdown(fd, SHUT_RDWR);
    size_t count = 0;
    (void)wait::drain_doorbells(fd, count);
    errno = saved;
}
}  // namespace

void channel_release(Channel& ch, int closing_fd) noexcept {
    if (ch.refs.fetch_sub(1, std::memory_order_acq_rel) != 1)
        return;
    if (ch.kind == ChannelKind::Shm) {
        // Everything we published stays readable for l5pgd; the flag says no more comes.
        // Set before the socket shows EOF, so l5pgd knows the departure was a clean one.
        ch.segment->header().client_closed.store(1, std::memory_order_release);
    }
    if (closing_fd >= 0)
        quiesce_socket(closing_fd);
    if (ch.kind == ChannelKind::Rdma) {
        rdma_destroy(ch);
        ch.in_use.store(0, std::memory_order_release);
        return;
    }
    ch.segment.reset();
    ch.in_use.store(0, std::memory_order_release);
}

void channel_forget_all_after_fork() noexcept {
    for (Channel& ch : g_pool) {
        if (ch.in_use.load(std::memory_order_relaxed) == 0)
            continue;
        ch.segment.reset();  // unmaps the child's copy; the parent's session is untouched
        ch.rdma = nullptr;   // leaked on purpose: see Channel::rdma
        ch.refs.store(0, std::memory_order_relaxed);
        ch.in_use.store(0, std::memory_order_relaxed);
    }
}

// ---------------------------------------------------------------- I/O

ssize_t channel_send(Channel& ch, int fd, const iovec* iov, int iovcnt, int flags,
                     bool nosignal) noexcept {
    if (ch.kind == ChannelKind::Rdma)
        return rdma_send(ch, fd, iov, iovcnt, flags, nosignal);
    const size_t total = iov_total(iov, iovcnt);
    size_t sent = 0;
    while (sent < total || total == 0) {
        if (cannot_send(ch)) {
            if (sent > 0)
                break;
            if (!nosignal)
                ::pthread_kill(::pthread_self(), SIGPIPE);
            return fail(ch.broken ? ECONNRESET : EPIPE);
        }
        if (total == 0)
            return 0;
        shm::RingStatus status;
        const size_t n = copy_into_ring(ch, iov, iovcnt, sent, status);
        if (status == shm::RingStatus::Corrupt) {
            mark_broken(ch, "impossible read position in the client->server ring");
            continue;
        }
        sent += n;
        if (n > 0 && ch.tx.reader_needs_wakeup() && !wait::ring_doorbell(fd))
            ch.peer_closed = true;
        if (sent == total)
            break;
        if (would_block(ch, flags)) {
            if (sent > 0)
                break;
            if (foreign_waiters_possible())
                ch.tx.arm();  // an epoll user waiting for POLLOUT then gets a doorbell
            if (ch.tx.free_bytes() > 0) {
                channel_disarm(ch, POLLOUT);
                continue;
            }
            return fail(EAGAIN);
        }
        if (!wait_until(ch, fd, true, [&ch] { return ch.tx.free_bytes() > 0 || cannot_send(ch); }))
            return sent > 0 ? static_cast<ssize_t>(sent) : -1;
    }
    prepare_return(ch, fd);
    return static_cast<ssize_t>(sent);
}

ssize_t channel_recv(Channel& ch, int fd, const iovec* iov, int iovcnt, int flags) noexcept {
    if (ch.kind == ChannelKind::Rdma)
        return rdma_recv(ch, fd, iov, iovcnt, flags);
    const size_t total = iov_total(iov, iovcnt);
    const bool peek = (flags & MSG_PEEK) != 0;
    const bool wait_all = (flags & MSG_WAITALL) != 0 && !would_block(ch, flags) && !peek;
    size_t got = 0;
    for (;;) {
        if (ch.broken)
            return got > 0 ? static_cast<ssize_t>(got) : fail(ECONNRESET);
        shm::RingStatus status;
        got += copy_from_ring(ch, iov, iovcnt, got, peek, status);
        if (status == shm::RingStatus::Corrupt) {
            mark_broken(ch, "impossible record in the server->client ring");
            continue;
        }
        if (got == total || (got > 0 && !wait_all))
            break;
        // The ring is empty. l5pgd publishes everything before it flags or closes, so
        // after seeing either, one more look at the ring decides between data and EOF.
        if (ch.peer_closed || server_closed(ch)) {
            if (ch.rx.has_data())
                continue;
            break;  // EOF (or the partial MSG_WAITALL result)
        }
        if (would_block(ch, flags)) {
            // A level-triggered epoll user must not find stale doorbell bytes on the
            // socket, so drain them here. Interposed pollers need no drain (a stale byte
            // costs them one extra round, and they drain after blocking), and libpq
            // calls recv() on an empty ring once per response: the drain would be a
            // system call on every round trip. (An l5pgd that died without flagging
            // server_closed is then noticed by the next poll: the socket's EOF.)
            if (foreign_waiters_possible()) {
                drain_socket(ch, fd);
                if (ch.peer_closed || ch.rx.has_data())
                    continue;
                ch.rx.arm();  // an epoll user waiting for POLLIN then gets a doorbell
                if (ch.rx.has_data())
                    continue;
            }
            if (got > 0)
                break;
            return fail(EAGAIN);
        }
        if (!wait_until(ch, fd, false, [&ch] { return ch.rx.has_data() || server_closed(ch); }))
            return got > 0 ? static_cast<ssize_t>(got) : -1;
    }
    if (got > 0 && ch.rx.writer_needs_wakeup() && !wait::ring_doorbell(fd))
        ch.peer_closed = true;
    prepare_return(ch, fd);
    return static_cast<ssize_t>(got);
}

// ---------------------------------------------------------------- poll support

void channel_prepare_for_foreign_wait(Channel& ch, int fd) noexcept {
    if (ch.kind == ChannelKind::Rdma) {
        rdma_prepare_for_foreign_wait(ch);
        return;
    }
    prepare_return(ch, fd);
}

short channel_revents(Channel& ch, short events) noexcept {
    if (ch.kind == ChannelKind::Rdma)
        return rdma_revents(ch, events);
    short revents = 0;
    const bool closed = ch.peer_closed || server_closed(ch);
    if ((events & POLLIN) && (ch.rx.has_data() || closed || ch.broken))
        revents |= POLLIN;
    if ((events & POLLOUT) && (ch.tx.free_bytes() > 0 || ch.broken))
        revents |= POLLOUT;
    if (ch.broken)
        revents |= POLLERR;
    if (closed && !ch.rx.has_data())
        revents |= POLLHUP;
    return revents;
}

void channel_arm(Channel& ch, short events) noexcept {
    if (ch.kind == ChannelKind::Rdma) {
        rdma_arm(ch, events);
        return;
    }
    if (events & POLLIN)
        ch.rx.arm();
    if (events & POLLOUT)
        ch.tx.arm();
}

// A disarm that finds the flag already taken means a doorbell byte is on its way; it is
// drained the next time we poll or find the ring empty.
void channel_disarm(Channel& ch, short events) noexcept {
    if (ch.kind == ChannelKind::Rdma)
        return;  // nothing to undo: a flag the server finds set costs one spurious doorbell
    if (events & POLLIN)
        (void)ch.rx.disarm();
    if (events & POLLOUT)
        (void)ch.tx.disarm();
}

void channel_drain(Channel& ch, int fd) noexcept {
    if (ch.kind == ChannelKind::Rdma) {
        rdma_drain(ch);
        return;
    }
    drain_socket(ch, fd);
}

}  // namespace l5pg::shim
