// Forwarding phase: bytes between the client (socket, SHM rings or RDMA channel; the RDMA
// specifics are in session_rdma.cpp) and the upstream
// Postgres socket, with backpressure in both directions. Nothing is parsed here.
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/session.hpp"
#include "daemon/worker.hpp"
#include "transport/wait/doorbell.hpp"

namespace l5pg::daemon {
namespace {

// Also the most a queue grows past limits.session_buffer_bytes (see byte_queue.hpp).
constexpr size_t kSocketChunk = 64 * 1024;
// Largest single recv from Postgres straight into the server->client ring.
constexpr size_t kRingChunk = 256 * 1024;
// Upstream reads per readiness callback before giving other sessions a turn.
constexpr int kRingReadsPerWakeup = 16;
// Doorbell bytes drained per wake-up: a client writing them in a loop gets one turn like
// everybody else, not the worker.
constexpr size_t kDoorbellDrainBudget = 4096;
// Credit per occasion for the client to ring (generous: an honest client rings once).
constexpr int64_t kDoorbellsPerOccasion = 4;

[[nodiscard]] bool transient(int err) noexcept {
    return err == EAGAIN || err == EINTR;
}

}  // namespace

// Stop reading one side while this much is queued for the other (socket and RDMA clients).
size_t Session::high_water() const noexcept {
    return worker_.config().limits.session_buffer_bytes;
}

void Session::finish_after_flush(std::string reason) {
    close_when_flushed_ = true;
    close_reason_ = std::move(reason);
}

// EPIPE or ECONNRESET: Postgres closed its end with our bytes unread -- a backend ended by
// pg_terminate_backend(), for one. Nothing more can go to it, but what it sent before
// (typically the FATAL that says why) is still to be read and delivered: the upstream's EOF
// ends the session there, as an orderly close, as it would for a direct client.
void Session::upstream_write_failed(int err) {
    if (err != EPIPE && err != ECONNRESET) {
        close(fmt::format("upstream write error: {}", std::strerror(err)), true);
        return;
    }
    spdlog::debug("session {}: Postgres closed its end ({}); delivering what it sent", id_,
                  std::strerror(err));
    upstream_refuses_ = true;
    upstream_blocked_ = false;
    to_upstream_.clear();
    set_event(upstream_write_.get(), false);
    update_upstream_reading();
}

// An honest client writes a doorbell byte only when it finds one of our wait flags set
// (it clears the flag as it rings) or to answer a doorbell of ours (the poke, at most one
// per doorbell we sent). So every doorbell it may send follows an occasion we created:
// arming a flag or ringing it. Each occasion grants a few doorbells' credit; a client
// whose doorbells exceed the credit writes them for no reason and only costs the worker
// (and every session on it) CPU: it is closed.
void Session::grant_doorbells(unsigned occasions) noexcept {
    doorbell_credit_ =
        std::min(kDoorbellSlack, doorbell_credit_ + kDoorbellsPerOccasion * occasions);
}

bool Session::account_doorbells(size_t count) {
    doorbells_received_ += count;
    doorbell_credit_ -= static_cast<int64_t>(count);
    if (doorbell_credit_ >= 0)
        return true;
    close(fmt::format("doorbell flood: {} doorbell bytes received, far more than this "
                      "session's ring activity explains",
                      doorbells_received_),
          true);
    return false;
}

void Session::wake_client() {
    if (client_gone_ || state_ == SessionState::Closed)
        return;
    grant_doorbells(1);
    metrics_.doorbell_sent();
    if (!wait::ring_doorbell(client_.get()))
        client_departed("client socket gone (doorbell failed)");
}

void Session::count_bytes(Direction direction, uint64_t n) {
    metrics_.add_bytes(transport_, direction, n);
    if (!record_)
        return;
    auto& total = direction == Direction::ClientToServer ? record_->bytes_from_client
                                                         : record_->bytes_to_client;
    total.fetch_add(n, std::memory_order_relaxed);
}

// Called for every chunk forwarded either way; only a change (a request went to Postgres,
// its answer began) reads the clock: for the round-trip histogram and the directory's
// last-activity time, so the per-chunk path stays free of clock reads.
void Session::set_awaiting_upstream(bool awaiting) {
    if (awaiting == awaiting_upstream_)
        return;
    awaiting_upstream_ = awaiting;
    const auto now = std::chrono::steady_clock::now();
    if (awaiting)
        request_forwarded_at_ = now;
    else
        metrics_.observe_round_trip(transport_, now - request_forwarded_at_);
    if (record_) {
        record_->active.store(awaiting, std::memory_order_relaxed);
        record_->note_activity(now);
    }
}

bool Session::poll_channel() {
    const bool moved = is_rdma() ? poll_rdma() : poll_ring();
    continue_departure();
    return moved;
}

bool Session::poll_ring() {
    switch (state_) {
        case SessionState::Closed:
        case SessionState::Connecting:
            return false;
        case SessionState::Startup:
            return drain_startup(&Session::read_startup_from_ring);
        case SessionState::Forwarding:
            break;
    }
    // The shim sets client_closed after its last record, before it closes the socket.
    if (segment_->header().client_closed.load(std::memory_order_acquire) != 0)
        client_departed("client closed the connection");
    bool moved = forward_ring_to_upstream();
    if (client_gone_)
        return moved;
    answer_poke();
    if (ring_full_ && state_ == SessionState::Forwarding && to_client_ring_.free_bytes() > 0) {
        (void)to_client_ring_.disarm();
        ring_full_ = false;
        read_upstream_into_ring();
        update_upstream_reading();
        moved = true;
    }
    return moved;
}

// A client that returns from recv() with data still in our ring arms reader_waiting and
// pokes us with a doorbell byte: it may next wait in an epoll we do not interpose
// (psycopg 3, asyncio), which only wakes if a byte arrives on its socket. Data already
// published never triggers reader_needs_wakeup() again, so answer here.
void Session::answer_poke() {
    if (state_ != SessionState::Forwarding)
        return;
    if (segment_->header().s2c.reader_waiting.load(std::memory_order_relaxed) == 0)
        return;
    if (!to_client_ring_.empty() && to_client_ring_.reader_needs_wakeup())
        wake_client();
}

bool Session::forward_ring_to_upstream() {
    bool moved = false;
    while (state_ == SessionState::Forwarding && upstream_.valid() && !upstream_blocked_ &&
           !upstream_shut_ && !upstream_refuses_ && to_upstream_.empty()) {
        std::span<const std::byte> data;
        const shm::RingStatus status = from_client_.peek(data);
        if (status == shm::RingStatus::Empty)
            break;
        if (status != shm::RingStatus::Ok) {
            close("shm protocol violation in the client->server ring", true);
            return moved;
        }
        // Sent straight from shared memory: the kernel copies it and we never parse it.
        const ssize_t n =
            ::send(upstream_.get(), data.data(), data.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            from_client_.consume(static_cast<size_t>(n));
            count_bytes(Direction::ClientToServer, static_cast<uint64_t>(n));
            moved = true;
        } else if (n < 0 && errno == EAGAIN) {
            upstream_blocked_ = true;
            set_event(upstream_write_.get(), true);
        } else if (!(n < 0 && errno == EINTR)) {
            upstream_write_failed(errno);
            return moved;
        }
    }
    if (moved)
        set_awaiting_upstream(true);
    if (moved && state_ != SessionState::Closed && from_client_.writer_needs_wakeup())
        wake_client();
    return moved;
}

void Session::on_doorbell() {
    size_t count = 0;
    const wait::DrainResult result =
        wait::drain_doorbells(client_.get(), count, kDoorbellDrainBudget);
    const int err = errno;
    if (result == wait::DrainResult::Drained && !account_doorbells(count))
        return;
    if (result == wait::DrainResult::PeerClosed) {
        const bool clean = segment_->header().client_closed.load(std::memory_order_acquire) != 0;
        client_departed(clean ? "client closed the connection" : "client disconnected");
    } else if (result == wait::DrainResult::Error) {
        // ECONNRESET: the client closed with our doorbell bytes unread -- a departure
        // like EOF (issue 20), and what it published is still in the ring.
        client_departed(fmt::format("client socket error: {}", std::strerror(err)),
                        err != ECONNRESET && err != EPIPE);
    }
    (void)poll_channel();
}

void Session::on_upstream_readable() {
    if (discarding_output())
        discard_upstream();
    else if (is_shm())
        read_upstream_into_ring();
    else
        read_upstream_into_queue();
}

void Session::read_upstream_into_ring() {
    bool published = false;
    for (int i = 0; i < kRingReadsPerWakeup && state_ == SessionState::Forwarding; ++i) {
        std::span<std::byte> space;
        const shm::RingStatus status = to_client_ring_.reserve(kRingChunk, space);
        if (status == shm::RingStatus::Corrupt) {
            close("shm protocol violation: impossible read position in the server->client ring",
                  true);
            return;
        }
        if (status == shm::RingStatus::Full) {
            // Dekker: arm, then re-check, so the client's next consume rings our doorbell.
            to_client_ring_.arm();
            grant_doorbells(1);
            if (to_client_ring_.free_bytes() > 0) {
                (void)to_client_ring_.disarm();
                continue;
            }
            ring_full_ = true;
            break;
        }
        const ssize_t n = ::recv(upstream_.get(), space.data(), space.size(), MSG_DONTWAIT);
        if (n > 0) {
            // Read back from shared memory: a client that scribbles over it only spoils
            // whether its own session gets a FATAL at shutdown.
            from_upstream_.feed(space.first(static_cast<size_t>(n)));
            to_client_ring_.commit(static_cast<size_t>(n));
            count_bytes(Direction::ServerToClient, static_cast<uint64_t>(n));
            published = true;
            set_awaiting_upstream(false);
            if (static_cast<size_t>(n) < space.size())
                break;
        } else if (n == 0 || errno == ECONNRESET) {
            // ECONNRESET: Postgres left bytes we forwarded unread (a terminated backend);
            // everything it sent is in the ring, as with the socket path's EOF.
            close(n == 0 ? "server closed the connection" : "server closed the connection (reset)");
            return;
        } else if (errno == EAGAIN) {
            break;
        } else if (errno != EINTR) {
            close(fmt::format("upstream read error: {}", std::strerror(errno)), true);
            return;
        }
    }
    if (published && to_client_ring_.reader_needs_wakeup())
        wake_client();
    update_upstream_reading();
}

void Session::read_upstream_into_queue() {
    std::span<std::byte> space = to_client_.prepare(kSocketChunk);
    const ssize_t n = ::recv(upstream_.get(), space.data(), space.size(), MSG_DONTWAIT);
    const int err = errno;
    if (n > 0)
        from_upstream_.feed(space.first(static_cast<size_t>(n)));
    to_client_.commit(n > 0 ? static_cast<size_t>(n) : 0);
    if (n > 0)
        set_awaiting_upstream(false);
    if (n == 0 || (n < 0 && err == ECONNRESET)) {
        // Postgres hung up (often right after a FATAL ErrorResponse; ECONNRESET when it
        // left bytes we forwarded unread, e.g. terminated): deliver what it sent, then close.
        upstream_read_.reset();
        upstream_.reset();
        finish_after_flush(n == 0 ? "server closed the connection"
                                  : "server closed the connection (reset)");
    } else if (n < 0 && !transient(err)) {
        close(fmt::format("upstream read error: {}", std::strerror(err)), true);
        return;
    }
    flush_client();
}

void Session::on_client_readable() {
    if (!upstream_.valid() || upstream_refuses_ || to_upstream_.size() >= high_water()) {
        if (close_when_flushed_ || upstream_refuses_) {
            std::byte discard[4096];
            if (stream_.recv(discard, sizeof discard) == 0)
                close("client disconnected");
            return;
        }
        set_event(client_read_.get(), false);
        return;
    }
    std::span<std::byte> space = to_upstream_.prepare(kSocketChunk);
    const ssize_t n = stream_.recv(space.data(), space.size());
    const int err = errno;
    to_upstream_.commit(n > 0 ? static_cast<size_t>(n) : 0);
    if (n == 0 || (n < 0 && !transient(err))) {
        client_eof_ = true;
        client_departed(n == 0 ? std::string("client disconnected")
                               : fmt::format("client read error: {}", std::strerror(err)),
                        n < 0 && err != ECONNRESET, /*may_still_read=*/n == 0);
        return;  // the callback goes on with continue_departure()
    }
    flush_upstream();
}

void Session::flush_upstream() {
    if (state_ != SessionState::Forwarding || !upstream_.valid())
        return;
    if (upstream_refuses_)
        to_upstream_.clear();
    while (!to_upstream_.empty()) {
        const auto data = to_upstream_.front();
        const ssize_t n =
            ::send(upstream_.get(), data.data(), data.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            to_upstream_.consume(static_cast<size_t>(n));
            count_bytes(Direction::ClientToServer, static_cast<uint64_t>(n));
            set_awaiting_upstream(true);
        } else if (n < 0 && errno == EAGAIN) {
            upstream_blocked_ = true;
            set_event(upstream_write_.get(), true);
            if (to_upstream_.size() >= high_water() && !is_rdma())
                set_event(client_read_.get(), false);
            return;
        } else if (!(n < 0 && errno == EINTR)) {
            upstream_write_failed(errno);
            return;
        }
    }
    upstream_blocked_ = false;
    set_event(upstream_write_.get(), false);
    if (cancel_request_ && close_when_flushed_) {
        close(close_reason_);
        return;
    }
    if (!client_gone_)
        set_event(client_read_.get(), true);
}

void Session::on_upstream_writable() {
    upstream_blocked_ = false;
    set_event(upstream_write_.get(), false);
    flush_upstream();
    if (is_shm())
        forward_ring_to_upstream();
    else if (is_rdma())
        forward_channel_to_upstream();
}

void Session::send_to_client(std::span<const std::byte> bytes) {
    if (state_ == SessionState::Closed)
        return;  // its sockets stay open until reaped: nothing may go out any more
    if (client_gone_) {
        if (close_when_flushed_)
            close(close_reason_);
        return;
    }
    if (!is_shm()) {
        to_client_.append(bytes);
        flush_client();
        return;
    }
    while (!bytes.empty() && state_ != SessionState::Closed) {
        shm::RingStatus status = shm::RingStatus::Ok;
        const size_t n = to_client_ring_.write(bytes, status);
        if (status == shm::RingStatus::Corrupt || n == 0) {
            close("cannot write to the client ring", true);
            return;
        }
        count_bytes(Direction::ServerToClient, n);
        bytes = bytes.subspan(n);
    }
    if (to_client_ring_.reader_needs_wakeup())
        wake_client();
    if (close_when_flushed_)
        close(close_reason_);
}

void Session::flush_client() {
    if (state_ == SessionState::Closed)
        return;
    if (is_rdma()) {
        flush_client_rdma();
        return;
    }
    if (discarding_output())
        to_client_.clear();
    while (!to_client_.empty()) {
        const auto data = to_client_.front();
        const ssize_t n = stream_.send(data.data(), data.size());
        if (n > 0) {
            to_client_.consume(static_cast<size_t>(n));
            count_bytes(Direction::ServerToClient, static_cast<uint64_t>(n));
        } else if (n < 0 && errno == EAGAIN) {
            set_event(client_write_.get(), true);
            update_upstream_reading();
            return;
        } else if (!(n < 0 && errno == EINTR)) {
            client_departed(fmt::format("client write error: {}", std::strerror(errno)));
            client_may_read_ = false;  // from now on Postgres's output is discarded
            to_client_.clear();
            set_event(client_write_.get(), false);
            update_upstream_reading();
            return;  // the callback goes on with continue_departure()
        }
    }
    set_event(client_write_.get(), false);
    if (close_when_flushed_) {
        close(close_reason_);
        return;
    }
    update_upstream_reading();
}

void Session::on_client_writable() {
    flush_client();
}

void Session::update_upstream_reading() {
    const bool want =
        state_ == SessionState::Forwarding && upstream_.valid() && !cancel_request_ &&
        !upstream_eof_ &&
        (discarding_output() || (is_shm() ? !ring_full_ : to_client_.size() < high_water()));
    set_event(upstream_read_.get(), want);
}

}  // namespace l5pg::daemon
