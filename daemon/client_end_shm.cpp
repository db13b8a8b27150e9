#include "daemon/client_end_shm.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "transport/wait/cpu_hint.hpp"
#include "transport/wait/doorbell.hpp"

namespace l5pg::daemon {
namespace {

// Doorbell bytes drained per wake-up: a client writing them in a loop gets one turn like
// everybody else, not the worker.
constexpr size_t kDoorbellDrainBudget = 4096;
// Credit per occasion for the client to ring (generous: an honest client rings once).
constexpr int64_t kDoorbellsPerOccasion = 4;

}  // namespace

ShmClientEnd::ShmClientEnd(shm::Segment segment, SegmentRegistry::Claim claim, int socket,
                           ClientEndHost& host, Metrics& metrics, pid_t client_pid,
                           DoorbellCoalescer& coalescer)
    : segment_(std::move(segment)),
      claim_(std::move(claim)),
      socket_(socket),
      host_(host),
      metrics_(metrics),
      client_pid_(client_pid),
      coalescer_(coalescer),
      from_client_(segment_.header().c2s, segment_.c2s_data(), segment_.c2s_size()),
      to_client_(segment_.header().s2c, segment_.s2c_data(), segment_.s2c_size()) {
    // The mapping keeps the memfd's file (and its inode, the registry's key) while the
    // session lasts: its descriptor would only count against l5pgd's open files.
    segment_.close_fd();
}

// An honest client writes a doorbell byte only when it finds one of our wait flags set
// (it clears the flag as it rings) or to answer a doorbell of ours (the poke, at most one
// per doorbell we sent). So every doorbell it may send follows an occasion we created:
// arming a flag or ringing it. Each occasion grants a few doorbells' credit; a client
// whose doorbells exceed the credit writes them for no reason and only costs the worker
// (and every session on it) CPU: it is closed.
void ShmClientEnd::grant_doorbells(unsigned occasions) noexcept {
    doorbell_credit_ =
        std::min(kDoorbellSlack, doorbell_credit_ + kDoorbellsPerOccasion * occasions);
}

bool ShmClientEnd::account_doorbells(size_t count) {
    poke_rung_ = poke_rung_ || count > 0;
    doorbells_received_ += count;
    metrics_.doorbells_received(count);
    doorbell_credit_ -= static_cast<int64_t>(count);
    if (doorbell_credit_ >= 0)
        return true;
    host_.close(fmt::format("doorbell flood: {} doorbell bytes received, far more than this "
                            "session's ring activity explains",
                            doorbells_received_),
                true);
    return false;
}

void ShmClientEnd::wake_client() {
    if (host_.client_gone())
        return;  // no more doorbells to it
    grant_doorbells(1);
    metrics_.doorbell_sent();
    if (!wait::ring_doorbell(socket_))
        host_.client_departed("client socket gone (doorbell failed)");
}

void ShmClientEnd::wake_reader_if_waiting() {
    uint64_t wait_id = wait::kUnnamedWait;
    if (!to_client_.reader_needs_wakeup(wait_id))
        return;
    if (coalescer_.must_ring(client_pid_, wait_id))
        wake_client();
    else
        metrics_.doorbell_coalesced();
}

void ShmClientEnd::on_socket_readable() {
    size_t count = 0;
    wait::PassedFds passed;
    const wait::DrainResult result =
        wait::drain_doorbells(socket_, count, kDoorbellDrainBudget, &passed);
    const int err = errno;
    if (passed.count > 0) {
        host_.client_passed_fds(passed);
        return;
    }
    if (result == wait::DrainResult::Drained && !account_doorbells(count))
        return;
    if (result == wait::DrainResult::PeerClosed) {
        const bool clean = segment_.header().client_closed.load(std::memory_order_acquire) != 0;
        host_.client_socket_ended();
        host_.client_departed(clean ? "client closed the connection" : "client disconnected");
    } else if (result == wait::DrainResult::Error) {
        // ECONNRESET: the client closed with our doorbell bytes unread -- a departure
        // like EOF (issue 20), and what it published is still in the ring.
        host_.client_socket_ended();
        host_.client_departed(fmt::format("client socket error: {}", std::strerror(err)),
                              err != ECONNRESET && err != EPIPE);
    }
}

void ShmClientEnd::progress(bool forwarding) {
    if (!forwarding)
        return;
    // The shim sets client_closed after its last record, before it closes the socket.
    if (segment_.header().client_closed.load(std::memory_order_acquire) != 0)
        host_.client_departed("client closed the connection");
    answer_poke();
}

// A client that returns from recv() with data still in our ring arms reader_waiting and
// pokes us with a doorbell byte: it may next wait in an epoll we do not interpose
// (psycopg 3, asyncio), which only wakes if a byte arrives on its socket. Data already
// published never triggers reader_needs_wakeup() again, so answer here. A poke is the
// flag and a doorbell byte: answered only once a doorbell has come since the last answer,
// or a client could set the flag again and again and make the worker send a doorbell for
// each store while it polls its sessions, without ringing itself (at most one answer per
// doorbell received: like any doorbell, it then costs the client as much as the worker).
void ShmClientEnd::answer_poke() {
    if (!poke_rung_ || host_.client_gone() ||
        segment_.header().s2c.reader_waiting.load(std::memory_order_relaxed) == 0)
        return;
    if (!to_client_.empty() && to_client_.reader_needs_wakeup()) {
        poke_rung_ = false;
        wake_client();
    }
}

IoStatus ShmClientEnd::peek(std::span<const std::byte>& data) {
    const shm::RingStatus status = from_client_.peek(data);
    if (status == shm::RingStatus::Empty)
        return IoStatus::WouldBlock;
    if (status != shm::RingStatus::Ok) {
        host_.close("shm protocol violation in the client->server ring", true);
        return IoStatus::Error;
    }
    return IoStatus::Ok;
}

// Sent straight from shared memory by the session (the kernel copied it), or for a pooled
// session from its own copy, which it walks: the ring itself is never parsed.
void ShmClientEnd::consume(size_t n) {
    from_client_.consume(n);
    if (from_client_.writer_needs_wakeup())
        wake_client();
}

IoStatus ShmClientEnd::reserve(size_t want, std::span<std::byte>& space) {
    if (!pending_.empty()) {
        if (!flush_pending())
            return IoStatus::Error;
        if (!pending_.empty())
            return IoStatus::WouldBlock;
    }
    for (;;) {
        const shm::RingStatus status = to_client_.reserve(want, space);
        if (status == shm::RingStatus::Ok)
            return IoStatus::Ok;
        if (status == shm::RingStatus::Corrupt) {
            close_for_read_position();
            return IoStatus::Error;
        }
        const shm::RingStatus room = await_room();
        if (room == shm::RingStatus::Corrupt)
            return IoStatus::Error;
        if (room == shm::RingStatus::Full)
            return IoStatus::WouldBlock;
    }
}

shm::RingStatus ShmClientEnd::await_room() {
    to_client_.arm();
    grant_doorbells(1);
    const shm::RingStatus room = to_client_.room();
    if (room == shm::RingStatus::Corrupt)
        close_for_read_position();
    else if (room == shm::RingStatus::Full)
        ring_full_ = true;
    else
        (void)to_client_.disarm();
    return room;
}

bool ShmClientEnd::flush_pending() {
    bool published = false;
    while (!pending_.empty() && !host_.client_gone()) {
        shm::RingStatus status = shm::RingStatus::Ok;
        const size_t n = to_client_.write(pending_.front(), status);
        if (status == shm::RingStatus::Corrupt) {
            close_for_read_position();
            return false;
        }
        if (n > 0) {
            pending_.consume(n);
            published = true;
            continue;
        }
        const shm::RingStatus room = await_room();
        if (room == shm::RingStatus::Corrupt)
            return false;
        if (room == shm::RingStatus::Full)
            break;
    }
    if (published)
        wake_reader_if_waiting();
    return true;
}

// Read back from shared memory by the session (for its message tracker): a client that
// scribbles over it only spoils whether its own session gets a FATAL at shutdown.
void ShmClientEnd::commit(size_t n) {
    if (n == 0)
        return;  // nothing received into the reserved record: it stays unpublished
    to_client_.commit(n);
    wake_reader_if_waiting();
}

void ShmClientEnd::send(std::span<const std::byte> bytes) {
    pending_.append(bytes);
    (void)flush_pending();
}

void ShmClientEnd::send_if_room(std::span<const std::byte> message) {
    if (!pending_.empty() || to_client_.free_bytes() < message.size() + 64)
        return;
    shm::RingStatus status = shm::RingStatus::Ok;
    (void)to_client_.write(message, status);  // on_close() rings the doorbell
}

void ShmClientEnd::close_for_read_position() {
    host_.close("shm protocol violation: impossible read position in the server->client ring",
                true);
}

bool ShmClientEnd::resume_output() {
    if (!ring_full_)
        return false;
    // A read position that cannot be: the session would wait for room that never comes.
    const shm::RingStatus room = to_client_.room();
    if (room == shm::RingStatus::Corrupt)
        close_for_read_position();
    if (room != shm::RingStatus::Ok)
        return false;
    (void)to_client_.disarm();
    ring_full_ = false;
    if (!flush_pending())  // full again if not all of it fitted
        return false;
    return pending_.empty() && !ring_full_;
}

bool ShmClientEnd::arm_before_block(bool input_wanted, uint64_t wait_id) {
    if (host_.client_gone())  // nothing comes from the client; the upstream socket wakes us
        return input_wanted && from_client_.has_data();
    from_client_.arm(wait_id);
    // Re-arm writer_waiting too: the client may have taken the flag (and rung) for a
    // partial read that freed nothing, so the flag armed when the ring filled is gone.
    if (ring_full_)
        to_client_.arm();
    grant_doorbells(ring_full_ ? 2 : 1);
    // A corrupt read position wakes us too: resume_output() closes the session.
    return (input_wanted && from_client_.has_data()) ||
           (ring_full_ && to_client_.room() != shm::RingStatus::Full);
}

// A false return means the client took the flag: it rang (the byte is drained by
// on_socket_readable()), or skipped because another of its threads rang this block
// (transport/wait/rung_waits.hpp). Either way we poll every ring next.
void ShmClientEnd::disarm_after_block() {
    (void)from_client_.disarm();
}

uint32_t ShmClientEnd::client_cpu() noexcept {
    return segment_.header().client_cpu.load(std::memory_order_relaxed);
}

bool ShmClientEnd::shares_sole_cpu(uint32_t worker_sole_cpu) noexcept {
    shm::Header& header = segment_.header();
    return wait::publish_and_compare(header.server_sole_cpu, header.client_sole_cpu,
                                     worker_sole_cpu);
}

void ShmClientEnd::on_client_gone(bool) {
    ring_full_ = false;  // stop waiting for the client to make room
    pending_.clear();
}

// Everything we published stays readable: the flag tells the client that no more will
// come, the doorbell wakes it if it is blocked.
void ShmClientEnd::on_close(bool, bool) {
    segment_.header().server_closed.store(1, std::memory_order_release);
    (void)wait::ring_doorbell(socket_);
}

}  // namespace l5pg::daemon
