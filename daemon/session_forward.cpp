// Forwarding phase: bytes between the client's end (client_end.hpp: socket, SHM rings or
// RDMA channel) and the upstream Postgres socket, with backpressure in both directions,
// written once for every transport. Nothing is parsed here beyond where Postgres's
// messages end (for a FATAL at shutdown) and, for pooled sessions, the types of the
// client's messages (session_pool.cpp).
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/session.hpp"
#include "daemon/worker.hpp"

namespace l5pg::daemon {
namespace {

// Largest single recv from Postgres into the client's end (an SHM ring takes it whole;
// socket and RDMA ends offer less).
constexpr size_t kUpstreamChunk = 256 * 1024;
// Upstream reads per readiness callback before giving other sessions a turn.
constexpr int kUpstreamReadsPerWakeup = 16;
// Client chunks forwarded or dropped per turn, likewise: a client can keep its end from ever
// running empty (in shared memory, two records whose lengths lead to each other, with nobody
// writing), and Postgres may take what l5pgd sends as fast as it comes.
constexpr int kClientChunksPerTurn = 64;

}  // namespace

// Stop reading one side while this much is queued for the other (socket and RDMA clients).
size_t Session::high_water() const noexcept {
    return worker_.config().limits.session_buffer_bytes;
}

void Session::finish_after_client_flush(std::string reason) {
    finish_when_ = FinishWhen::ClientFlushed;
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

void Session::count_bytes(Direction direction, uint64_t n) {
    metrics_.add_bytes(transport_, direction, n);
    if (database_counters_ != nullptr)
        database_counters_->add_bytes(direction, n);
    if (!record_)
        return;
    auto& total = direction == Direction::ClientToServer ? record_->bytes_from_client
                                                         : record_->bytes_to_client;
    total.fetch_add(n, std::memory_order_relaxed);
}

// Called for every chunk forwarded either way; only a change (a request went to Postgres,
// its answer began) reads the clock: for the round-trip histogram (Postgres's, so not the
// admin console's) and the directory's last-activity time, so the per-chunk path stays
// free of clock reads. The directory's "active" lasts until the ReadyForQuery
// (note_idle(), once per chunk that holds one), not just until the answer's first byte: a
// notice or a streamed result is not the end of the statement.
void Session::set_awaiting_upstream(bool awaiting) {
    if (awaiting == awaiting_upstream_)
        return;
    awaiting_upstream_ = awaiting;
    const auto now = std::chrono::steady_clock::now();
    if (awaiting)
        request_forwarded_at_ = now;
    else if (!admin_)
        metrics_.observe_round_trip(transport_, now - request_forwarded_at_);
    if (record_) {
        if (awaiting)
            record_->active.store(true, std::memory_order_relaxed);
        record_->note_activity(now);
    }
}

void Session::note_idle() {
    if (!record_)
        return;
    record_->active.store(false, std::memory_order_relaxed);
    // An answer that ends in the chunk it began in (a point read's) has its time noted by
    // set_awaiting_upstream(false) right after: no second clock read for it.
    if (!awaiting_upstream_)
        record_->note_activity(std::chrono::steady_clock::now());
}

bool Session::poll_channel() {
    const bool moved = pump();
    continue_departure();
    return moved;
}

bool Session::pump() {
    switch (state_) {
        case SessionState::Closed:
            return false;
        case SessionState::Connecting:
            // A socket end stops reading until the upstream is there (flush_upstream()
            // resumes it); a level-triggered read event would fire meanwhile.
            end_->want_input(false);
            return false;
        case SessionState::Startup:
            end_->progress(false);
            return state_ == SessionState::Startup && drain_startup();
        case SessionState::Refusing:
            // Nothing the client sends matters any more, but its EOF does.
            discard_client_input();
            flush_client();
            return false;
        case SessionState::Forwarding:
            break;
    }
    end_->progress(true);
    bool moved = forward_client_to_upstream();
    if (state_ != SessionState::Forwarding)
        return moved;
    // The polling loop's hot path: nothing here touches libevent unless the client made
    // room (read_upstream() ends in flush_client()) or the session waits to close.
    if (!client_gone_ && end_->resume_output()) {
        read_upstream();
        moved = true;
    } else if (finish_when_ != FinishWhen::Open) {
        flush_client();
    }
    return moved;
}

bool Session::forward_client_to_upstream() {
    if (!upstream_.valid() || upstream_refuses_) {
        discard_client_input();
        return false;
    }
    if (holding_for_authentication()) {
        input_held_ = true;
        end_->want_input(false);
        return false;
    }
    bool moved = false;
    int chunks = 0;
    while (state_ == SessionState::Forwarding && !upstream_blocked_ && !upstream_shut_ &&
           !upstream_refuses_ && to_upstream_.empty()) {
        if (++chunks > kClientChunksPerTurn) {
            client_turn_over();
            break;
        }
        std::span<const std::byte> data;
        if (end_->peek(data) != IoStatus::Ok)
            break;
        size_t forwardable = data.size();
        if (pool_.pooled) {
            if (pool_.terminated) {  // nothing after a Terminate counts
                end_->consume(data.size());
                break;
            }
            data = copy_client_chunk(data);
            forwardable = before_terminate(data);
            if (forwardable == 0) {
                // The client's Terminate, which Postgres must not see. Postgres would close
                // the connection now; so does l5pgd, once the backend is reset
                // (session_depart.cpp, session_pool.cpp).
                end_->consume(data.size());
                pool_.terminated = true;
                client_departed("client sent Terminate");
                break;
            }
        }
        // Sent straight from the end (for SHM: from shared memory, which the kernel copies),
        // or for a pooled session from the copy it walked.
        const ssize_t n =
            ::send(upstream_.get(), data.data(), forwardable, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            if (pool_.pooled)
                note_forwarded(data.first(static_cast<size_t>(n)), forwardable);
            end_->consume(static_cast<size_t>(n));
            count_bytes(Direction::ClientToServer, static_cast<uint64_t>(n));
            moved = true;
        } else if (n < 0 && errno == EAGAIN) {
            upstream_blocked_ = true;
            set_event(upstream_write_.get(), true);
            end_->want_input(false);
        } else if (!(n < 0 && errno == EINTR)) {
            upstream_write_failed(errno);
        }
    }
    if (moved)
        set_awaiting_upstream(true);
    return moved;
}

// Postgres is gone or refuses more (its backend ended), or the session only waits to flush
// a FATAL: what the client still sends goes nowhere, but its EOF must be noticed.
void Session::discard_client_input() {
    std::span<const std::byte> data;
    for (int chunks = 0; state_ != SessionState::Closed && end_->peek(data) == IoStatus::Ok;
         ++chunks) {
        if (chunks == kClientChunksPerTurn) {
            client_turn_over();
            return;
        }
        end_->consume(data.size());
    }
}

// The client's end may hold more: a polled end is looked at again next round. A socket end,
// whose bytes may all be in its queue or the kernel's already (no readiness event would
// come), gets a callback again once the other events had theirs: its read callback, or once
// it departed (its read callback then drains doorbells, not data) the upstream's write
// callback, which forwards and goes on with the departure.
void Session::client_turn_over() {
    if (end_->polled())
        return;
    if (!client_gone_)
        event_active(client_read_.get(), EV_READ, 0);
    else if (upstream_write_)
        event_active(upstream_write_.get(), EV_WRITE, 0);
}

void Session::on_upstream_readable() {
    if (finish_when_ == FinishWhen::UpstreamClosed) {
        discard_upstream();
        if (upstream_eof_) {
            cancel_in_flight_.confirm();  // Postgres took the request
            close(close_reason_);
        }
    } else if (pool_.room_wait == PoolState::RoomWait::BackendEnding)
        read_retiring();
    else if (pool_.login_check)
        read_login_check_answer();
    else if (pool_.reset)
        read_reset_answer();
    else if (discarding_output())
        discard_upstream();
    else
        read_upstream();
}

void Session::read_upstream() {
    if (pool_.greeting_reader && state_ == SessionState::Forwarding) {
        read_greeting();
        return;
    }
    if (pool_.login_check) {  // pump() may come here when the client made room
        read_login_check_answer();
        return;
    }
    read_upstream_chunks();
    release_held_input();
}

void Session::read_upstream_chunks() {
    for (int i = 0; i < kUpstreamReadsPerWakeup && state_ == SessionState::Forwarding &&
                    upstream_.valid() && !upstream_eof_;
         ++i) {
        std::span<std::byte> space;
        if (end_->reserve(kUpstreamChunk, space) != IoStatus::Ok)
            break;  // full: the end resumes us when the client made room (pump())
        const ssize_t n = recv_upstream(space);
        const int err = errno;
        if (n > 0) {
            end_->commit(static_cast<size_t>(n));
            count_bytes(Direction::ServerToClient, static_cast<uint64_t>(n));
            set_awaiting_upstream(false);
            if (static_cast<size_t>(n) < space.size())
                break;
            continue;
        }
        end_->commit(0);
        if (err == EACCES) {
            refuse_unauthenticated_login();
            return;
        }
        if (n == 0 || err == ECONNRESET) {
            // Postgres hung up (often right after a FATAL ErrorResponse; ECONNRESET when it
            // left bytes we forwarded unread, e.g. terminated): deliver what it sent, then
            // close.
            drop_upstream();  // its write event too: the descriptor number may be reused
            finish_after_client_flush(n == 0 ? "server closed the connection"
                                             : "server closed the connection (reset)");
            break;
        }
        if (err != EAGAIN && err != EINTR) {
            close(fmt::format("upstream read error: {}", std::strerror(err)), true);
            return;
        }
        break;
    }
    flush_client();
}

// The end's space may be shared memory the client can rewrite at any moment. Where what
// l5pgd reads of Postgres's messages decides something beyond this client's own stream --
// its cancel key (until the key watcher has it), whether a pooled backend is idle -- it
// reads a private copy of the bytes, and the end gets the same bytes. Elsewhere the message
// boundaries are followed in place: for a FATAL of l5pgd's own, and for SHOW SESSIONS'
// active/idle, which a client rewriting its ring can only misreport for itself.
ssize_t Session::recv_upstream(std::span<std::byte> space) {
    if (!key_watcher_ && !pool_.pooled) {
        const ssize_t n = ::recv(upstream_.get(), space.data(), space.size(), MSG_DONTWAIT);
        if (n > 0)
            note_from_upstream(space.first(static_cast<size_t>(n)));
        return n;
    }
    const std::span<std::byte> copy = worker_.scratch(space.size());
    const ssize_t n = ::recv(upstream_.get(), copy.data(), copy.size(), MSG_DONTWAIT);
    if (n <= 0)
        return n;  // errno is recv()'s
    const auto got = std::span<const std::byte>(copy).first(static_cast<size_t>(n));
    if (!watch_for_key(got)) {
        errno = EACCES;  // nothing delivered: read_upstream() refuses the session
        return -1;
    }
    std::copy(got.begin(), got.end(), space.begin());
    note_from_upstream(got);
    return n;
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
            return;
        } else if (!(n < 0 && errno == EINTR)) {
            upstream_write_failed(errno);
            return;
        }
    }
    upstream_blocked_ = false;
    set_event(upstream_write_.get(), false);
    if (finish_when_ == FinishWhen::UpstreamClosed)
        return;  // nothing more comes from the client: Postgres's EOF ends the session
    if (!client_gone_)
        end_->want_input(true);
}

void Session::on_upstream_writable() {
    upstream_blocked_ = false;
    set_event(upstream_write_.get(), false);
    flush_upstream();
    (void)forward_client_to_upstream();
}

// Bytes l5pgd itself sends (an 'N', an ErrorResponse).
void Session::send_to_client(std::span<const std::byte> bytes) {
    if (state_ == SessionState::Closed)
        return;                 // its sockets stay open until reaped: nothing may go out any more
    if (discarding_output()) {  // a half-closed client still reads them
        if (finish_when_ != FinishWhen::Open)
            close(close_reason_);
        return;
    }
    count_bytes(Direction::ServerToClient, bytes.size());
    end_->send(bytes);
    flush_client();
}

void Session::flush_client() {
    if (state_ == SessionState::Closed)
        return;
    end_->flush();
    if (state_ == SessionState::Closed)
        return;
    if (finish_when_ == FinishWhen::ClientFlushed && !end_->output_queued()) {
        close(close_reason_);
        return;
    }
    update_upstream_reading();
}

void Session::on_client_writable() {
    end_->on_socket_writable();
    flush_client();
}

void Session::update_upstream_reading() {
    // A kept connection's login check is read whatever the client does meanwhile.
    const bool want =
        pool_.login_check != nullptr || finish_when_ == FinishWhen::UpstreamClosed ||
        pool_.room_wait == PoolState::RoomWait::BackendEnding ||
        (state_ == SessionState::Forwarding && upstream_.valid() && !cancel_request_ &&
         !upstream_eof_ && (discarding_output() || end_->has_room()));
    set_event(upstream_read_.get(), want);
}

}  // namespace l5pg::daemon
