#include "clientlib/shm_end.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "clientlib/debug_log.hpp"
#include "clientlib/settings.hpp"
#include "transport/wait/cpu_hint.hpp"
#include "transport/wait/doorbell.hpp"
#include "transport/wait/rung_waits.hpp"
#include "transport/wait/session_policy.hpp"

namespace l5pg::shim {
namespace {

// Process-wide: the threads of a client program rarely differ in affinity, and it is a hint.
wait::SoleCpuHint g_sole_cpu;
// Each waiting thread's view of the CPUs it spins on (constant-initialized: no TLS guard).
thread_local wait::CrowdingGauge t_crowding{wait::CrowdingGauge::RateCheck::On};
// Process-wide: the blocks of l5pgd's workers rung by any of our threads.
constinit wait::RungWaits g_rung_waits;

}  // namespace

void shm_forget_rung_waits_after_fork() {
    g_rung_waits.forget();
}

using transport::IoResult;
using transport::IoStatus;
using transport::Want;

ShmEnd::ShmEnd(shm::Segment segment)
    : segment_(std::move(segment)),
      tx_(segment_.header().c2s, segment_.c2s_data(), segment_.c2s_size()),
      rx_(segment_.header().s2c, segment_.s2c_data(), segment_.s2c_size()) {}

bool ShmEnd::server_closed() {
    return segment_.header().server_closed.load(std::memory_order_acquire) != 0;
}

void ShmEnd::mark_broken(const char* what) {
    if (error_ == nullptr)
        debug_log().str("shared memory protocol violation: ").str(what).end();
    error_ = what;
}

bool ShmEnd::ring(int fd) {
    if (wait::ring_doorbell(fd))
        return true;
    peer_closed_ = true;
    return false;
}

IoResult ShmEnd::write(int fd, std::span<const std::byte> bytes) {
    if (broken())
        return {0, IoStatus::Error};
    if (closed())
        return {0, IoStatus::Closed};
    if (bytes.empty())
        return {0, IoStatus::Ok};
    shm::RingStatus status = shm::RingStatus::Ok;
    const size_t n = tx_.write(bytes, status);
    if (status == shm::RingStatus::Corrupt) {
        mark_broken("impossible read position in the client->server ring");
        return {n, IoStatus::Error};
    }
    if (n == 0)
        return {0, IoStatus::WouldBlock};
    uint64_t wait_id = wait::kUnnamedWait;
    if (tx_.reader_needs_wakeup(wait_id) && !g_rung_waits.rung(wait_id) && ring(fd))
        g_rung_waits.remember(wait_id);  // after the doorbell went out (rung_waits.hpp)
    return {n, IoStatus::Ok};
}

// l5pgd publishes everything before it flags server_closed or closes its socket, so after
// seeing either, one more look at the ring decides between data and EOF.
IoResult ShmEnd::nothing_to_read() {
    if (closed() && !rx_.has_data())
        return {0, IoStatus::Closed};
    return {0, IoStatus::WouldBlock};
}

IoResult ShmEnd::read(int fd, std::span<std::byte> out) {
    if (broken())
        return {0, IoStatus::Error};
    shm::RingStatus status = shm::RingStatus::Ok;
    const size_t n = rx_.read(out, status);
    if (status == shm::RingStatus::Corrupt) {
        mark_broken("impossible record in the server->client ring");
        return {n, IoStatus::Error};
    }
    if (n == 0)
        return nothing_to_read();
    if (rx_.writer_needs_wakeup())
        ring(fd);
    return {n, IoStatus::Ok};
}

// What a socket's MSG_PEEK gives: the unread bytes across records, nothing consumed.
IoResult ShmEnd::peek(std::span<std::byte> out, size_t skip) {
    if (broken())
        return {0, IoStatus::Error};
    shm::RingStatus status = shm::RingStatus::Ok;
    const size_t n = rx_.peek_ahead(out, skip, status);
    // Past `skip` bytes a peek has shown already: those stay readable, and the read that
    // reaches the impossible record breaks the channel then.
    if (status == shm::RingStatus::Corrupt && n == 0 && skip == 0) {
        mark_broken("impossible record in the server->client ring");
        return {0, IoStatus::Error};
    }
    if (n == 0)
        return nothing_to_read();
    return {n, IoStatus::Ok};
}

// Every published record's unread bytes, up to an impossible one (the read that reaches it
// breaks the channel).
size_t ShmEnd::unread_bytes() {
    return broken() ? 0 : rx_.unread_bytes();
}

bool ShmEnd::ready(Want want) {
    if (broken() || closed())
        return true;  // read() reports EOF or the error, write() the failure
    return want == Want::Read ? rx_.has_data() : tx_.free_bytes() > 0;
}

// Only a wait for data carries the wait's name (RingControl::reader_wait_id): l5pgd rings a
// client that waits for space when it consumes, once per arming, as before names existed.
bool ShmEnd::arm(Want want, uint64_t wait_id) {
    if (want == Want::Read) {
        rx_.arm(wait_id);
    } else {
        armed_for_room_.store(true, std::memory_order_relaxed);
        tx_.arm();
    }
    return true;  // the caller's re-check decides
}

// A disarm that finds the flag already taken means a doorbell byte is on its way; it is
// drained the next time we poll or find the ring empty.
void ShmEnd::disarm(Want want) {
    if (want == Want::Read)
        (void)rx_.disarm();
    else
        (void)tx_.disarm();
}

void ShmEnd::on_socket_readable(int fd) {
    size_t count = 0;
    const int saved = errno;
    if (wait::drain_doorbells(fd, count) == wait::DrainResult::PeerClosed)
        peer_closed_ = true;
    if (count > 0)
        poke_outstanding_.store(false, std::memory_order_relaxed);
    errno = saved;
}

// Either the ring is empty and reader_waiting is armed (l5pgd rings when it publishes),
// or it holds data and a doorbell byte is pending or requested: the "poke", one byte to
// l5pgd, which answers with one while data is unread (daemon/client_end_shm.cpp answer_poke()).
void ShmEnd::prepare_for_foreign_wait(int fd, bool room_awaited) {
    if (broken() || peer_closed_)
        return;
    drain_owed_doorbells(fd, room_awaited);
    if (!rx_.has_data()) {
        armed_for_data_.store(true, std::memory_order_relaxed);
        rx_.arm();
        if (!rx_.has_data())
            return;  // Dekker re-check: the flag covers what comes next
    }
    // Claimed before the byte goes out: another thread may drain the answer at once.
    if (poke_outstanding_.exchange(true, std::memory_order_relaxed))
        return;
    armed_for_data_.store(true, std::memory_order_relaxed);
    rx_.arm();
    if (!ring(fd))
        poke_outstanding_.store(false, std::memory_order_relaxed);
}

// The doorbells of earlier foreign waits are drained where a read finds the ring empty. An
// edge-triggered epoll user (tokio; libevent's EV_ET) never makes that read: it reads once per
// edge and stops at a short read, and a writer of a COPY reads nothing at all. Left on the
// socket, one byte per answer or per room made, they filled it until l5pgd's next doorbell
// failed with EAGAIN (rung, for a level-triggered poller, since the bytes there wake it) and
// no new edge came. So each return drains what is owed: the doorbell of a wait whose flag
// l5pgd took, or a poke's answer. (One still on its way is drained at a later return; the
// edge it makes only costs the loop a round.) A doorbell for data may be drained under
// another thread's wait for data: what follows here arms again or pokes (end_waiters.hpp).
// Nothing is drained while a thread waits for room: the bytes cannot be told apart, nothing
// would ring again for room already made, and that thread's poll() would sleep on; they are
// drained at a later return. (A thread that starts to wait for room in the instant between
// the caller's look and this drain, and is rung within it, loses its doorbell: its wait
// looks at the ring again within 1-64 ms, end_waiters.hpp may_miss_doorbell().)
void ShmEnd::drain_owed_doorbells(int fd, bool room_awaited) {
    if (room_awaited)
        return;
    const bool for_data = armed_for_data_.load(std::memory_order_relaxed) && !rx_.armed();
    const bool for_room = armed_for_room_.load(std::memory_order_relaxed) && !tx_.armed();
    if (!for_data && !for_room && !poke_outstanding_.load(std::memory_order_relaxed))
        return;
    if (for_data)
        armed_for_data_.store(false, std::memory_order_relaxed);
    if (for_room)
        armed_for_room_.store(false, std::memory_order_relaxed);
    on_socket_readable(fd);
}

// As on a Unix socket whose peer closed: POLLHUP at once, beside POLLIN while data is left.
bool ShmEnd::hung_up() {
    return closed();
}

wait::WaitPolicy ShmEnd::wait_policy(wait::AdaptiveSpin& spin, const wait::WaitPolicy& configured,
                                     bool only_session) {
    shm::Header& header = segment_.header();
    wait::publish_current_cpu(header.client_cpu);  // where a blocking worker may join us
    wait::CrowdingGauge* gauge = settings().block_when_crowded ? &t_crowding : nullptr;
    return wait::session_wait_policy(
        {g_sole_cpu, header.client_sole_cpu, header.server_sole_cpu, gauge}, only_session, spin,
        configured);
}

// Everything we published stays readable for l5pgd; the flag says no more comes. Set
// before the socket shows EOF, so l5pgd knows the departure was a clean one.
void ShmEnd::close_by_application() {
    segment_.header().client_closed.store(1, std::memory_order_release);
}

void ShmEnd::forget_after_fork() {
    segment_.reset();  // unmaps the child's copy; the parent's session is untouched
}

}  // namespace l5pg::shim
