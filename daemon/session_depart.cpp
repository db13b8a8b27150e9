// Client departure: one path for socket, SHM and RDMA sessions (issue 20).
//
// libpq ends a connection by sending Terminate right after whatever it still had to send,
// and does not wait for answers: a client may publish a statement and close, exit or die
// at once. Directly connected, Postgres reads and runs all of it. So must l5pgd, however it
// learns that the client left: EOF on the client socket; ECONNRESET there (what Linux
// reports when the client closed with our doorbell bytes unread in its socket); EPIPE or
// a failed doorbell when we write to it; the segment's client_closed flag; the RDMA channel
// reporting Closed, or failing because the client tore its queue pair down. Whichever
// comes first calls client_departed(), which only marks the session. From then on,
// continue_departure() (called at the end of every callback and polling round):
//   1. forwards everything the client had published, in order -- the SHM ring, the RDMA
//      ring, the bytes still in its socket -- waiting for the upstream socket to become
//      writable as often as needed;
//   2. then shuts the upstream's write side, so Postgres reads all of it and then EOF, and
//      ends the backend itself (a Terminate among the data already did);
//   3. meanwhile reads and discards what Postgres sends: nobody can receive it, and a
//      Postgres whose writes fail would abort the statements it has not run yet;
//   4. closes once Postgres has closed, or after limits.drain_timeout_ms.
// A socket client that only shut down its sending side still reads: Postgres's answers go
// to it instead of being discarded, up to the drain timeout all the same (an EOF does not
// tell a half-closed client from one that closed or died, and those must not hold their
// session for as long as Postgres runs their last statement).
// The client's socket is not watched any more (EOF stays readable for ever) and nothing
// is written to it. A departure counts as a session error only if the session cannot
// hand everything to Postgres in time or the client left through a real failure.
#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/session.hpp"
#include "daemon/worker.hpp"
#include "transport/wait/doorbell.hpp"

namespace l5pg::daemon {
namespace {

constexpr size_t kDiscardChunk = 16 * 1024;
// Upstream reads per callback while discarding, before other sessions get a turn.
constexpr int kDiscardReads = 16;

}  // namespace

void Session::client_departed(std::string reason, bool error, bool may_still_read) {
    if (state_ == SessionState::Closed)
        return;
    if (client_gone_) {
        // A socket client that only shut down its sending side still reads, until a send
        // to it fails (this call, from its end).
        if (client_may_read_ && !may_still_read) {
            client_may_read_ = false;
            end_->on_client_gone(false);
            update_upstream_reading();
        }
        return;
    }
    client_gone_ = true;
    departure_error_ = error;
    departure_reason_ = std::move(reason);
    spdlog::debug("session {}: {}: forwarding what it sent, then closing", id_, departure_reason_);
    set_event(client_read_.get(), false);
    // A socket client that only shut down its sending side still reads, as it would from
    // Postgres directly (only a socket end reports may_still_read).
    client_may_read_ = may_still_read;
    end_->on_client_gone(may_still_read);
    update_upstream_reading();
}

void Session::continue_departure() {
    if (!client_gone_ || state_ == SessionState::Closed)
        return;
    if (state_ == SessionState::Startup) {
        // Nothing reached Postgres yet; a half-read startup packet is not worth one.
        close(departure_reason_ + " during startup", departure_error_);
        return;
    }
    if (state_ == SessionState::Connecting)
        return;  // on_upstream_connected() ends in a callback that calls us again
    if (!drain_timer_armed_) {
        drain_timer_armed_ = true;
        arm_timer(worker_.config().limits.drain_timeout_ms);
    }
    if (!upstream_.valid()) {
        // Postgres left first (finish_after_client_flush): nothing more can go to it. A client
        // that still reads gets the rest of Postgres's output first (flush_client closes).
        if (!client_may_read_ || !end_->output_queued())
            finish_departure("");
        return;
    }
    if (pool_.reset)
        return;  // the server connection's reset for the pool runs (session_pool.cpp)
    if (!upstream_shut_) {
        if (!drain_client_data() || state_ == SessionState::Closed)
            return;  // the upstream socket is full: on_upstream_writable() resumes
        // Nothing more can come from the client: an RDMA end frees its channel, and the
        // session leaves the polling loop (a peer-closed channel would keep the worker
        // from ever blocking).
        end_->on_input_done();
        set_polled(false);
        if (!pool_.terminate_queued && try_pool_reset())
            return;
        if (pool_.terminated && !pool_.terminate_queued) {
            // Held back for the pool, Postgres gets it after all, through the queue: sent
            // straight, a socket with less room than 5 bytes would take part of it and the
            // SHUT_WR below would leave Postgres a truncated message.
            pool_.terminate_queued = true;
            to_upstream_.append(protocol::kTerminateMessage);
            if (!drain_client_data() || state_ == SessionState::Closed)
                return;  // on_upstream_writable() resumes
        }
        // Everything is in Postgres's socket: let it read to the end, then EOF.
        (void)::shutdown(upstream_.get(), SHUT_WR);
        upstream_shut_ = true;
        update_upstream_reading();
    }
    if (upstream_eof_)
        finish_departure("");
}

// True once everything the client published has been handed to the upstream socket. A
// socket end reads what is still in the socket (the kernel hands it out before it reports
// EOF or ECONNRESET) until it has nothing more -- or up to a Terminate (pooled sessions):
// nothing after it counts, and the client need not close first.
bool Session::drain_client_data() {
    if (upstream_refuses_)
        return true;  // Postgres closed its end: nothing more can reach it
    flush_upstream();
    (void)forward_client_to_upstream();
    return state_ == SessionState::Forwarding && !upstream_blocked_ && to_upstream_.empty() &&
           (pool_.terminated || end_->input_exhausted());
}

void Session::discard_upstream() {
    std::array<std::byte, kDiscardChunk> sink;
    for (int i = 0; i < kDiscardReads; ++i) {
        const ssize_t n = ::recv(upstream_.get(), sink.data(), sink.size(), MSG_DONTWAIT);
        if (n > 0) {
            if (key_watcher_ && !watch_departed_login({sink.data(), static_cast<size_t>(n)}))
                return;
            continue;
        }
        // ECONNRESET: Postgres left with bytes we forwarded unread (its backend was
        // terminated, or ended at a Terminate with more behind it) -- what a direct client
        // would have caused too, and everything the client published was handed over.
        if (n == 0 || errno == ECONNRESET) {
            upstream_eof_ = true;
            set_event(upstream_read_.get(), false);
            return;  // continue_departure() closes, or reports what could not be sent
        }
        if (errno == EAGAIN || errno == EINTR)
            return;
        close(fmt::format("{}; upstream read error while forwarding its last messages: {}",
                          departure_reason_, std::strerror(errno)),
              true);
        return;
    }
}

// Under passthrough, what a client sent behind its StartupMessage waits until Postgres asks
// it to authenticate (holding_for_authentication()). Once it has left, Postgres's output is
// discarded, and the ask is looked for here: what the client sent then goes on to Postgres,
// as it would from a direct client that left, instead of waiting for the drain timeout.
// False once the session is closed (Postgres accepted the login unasked).
bool Session::watch_departed_login(std::span<const std::byte> bytes) {
    if (!watch_for_key(bytes)) {
        close(departure_reason_ +
                  "; Postgres accepted its login without asking it to authenticate (auth "
                  "passthrough): nothing it sent was forwarded",
              true);
        return false;
    }
    release_held_input();
    return state_ != SessionState::Closed;
}

// The departed client's socket is readable: doorbell bytes to drop, or its end. EOF,
// ECONNRESET or EPIPE there mean the client closed it: the departure was an orderly one
// even if the channel failed first (see finish_departure()).
void Session::watch_departed_client() {
    // Bounded: a client writing to the socket in a loop does not keep the worker here (the
    // read event, level-triggered, brings us back).
    constexpr size_t kDrainBudget = 64 * 1024;
    size_t count = 0;
    wait::PassedFds passed;
    const wait::DrainResult result =
        wait::drain_doorbells(client_.get(), count, kDrainBudget, &passed);
    if (passed.count > 0) {
        client_passed_fds(passed);
        return;
    }
    if (result == wait::DrainResult::Drained)
        return;
    if (result == wait::DrainResult::PeerClosed || errno == ECONNRESET || errno == EPIPE)
        departure_error_ = false;
    client_eof_ = true;
    set_event(client_read_.get(), false);
}

// Why a departing session was still open at limits.drain_timeout_ms.
std::string_view Session::departure_timeout_reason() const {
    if (!upstream_shut_)
        return " (drain timeout: not all of it sent)";
    // A half-closed client that stopped reading holds Postgres up as much as a long
    // statement does: say which.
    if (client_may_read_ && end_->output_queued())
        return " (drain timeout: the client, gone half-way, did not read Postgres's answers)";
    return " (Postgres still busy at drain timeout)";
}

void Session::finish_departure(std::string_view how, bool timed_out) {
    if (departure_error_ && !timed_out && !client_eof_) {
        // A client closing normally tears its RDMA queue pair down before it closes its
        // socket: the soft device's wire fails first. Only the socket's EOF tells that from
        // a real failure; wait for it (client_read_cb comes back), bounded by the drain timer.
        watch_departed_client();
        if (!client_eof_) {
            set_event(client_read_.get(), true);
            return;
        }
    }
    close(departure_reason_ + std::string(how), departure_error_);
}

}  // namespace l5pg::daemon
