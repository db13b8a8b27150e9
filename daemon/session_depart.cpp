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
constexpr size_t kClientChunk = 64 * 1024;

}  // namespace

void Session::client_departed(std::string reason, bool error, bool may_still_read) {
    if (client_gone_ || state_ == SessionState::Closed)
        return;
    client_gone_ = true;
    departure_error_ = error;
    departure_reason_ = std::move(reason);
    spdlog::debug("session {}: {}: forwarding what it sent, then closing", id_, departure_reason_);
    set_event(client_read_.get(), false);
    // A socket client that only shut down its sending side still reads, as it would from
    // Postgres directly; the first failed send to it ends that (flush_client()).
    client_may_read_ = may_still_read && !is_shm() && !is_rdma();
    if (!client_may_read_) {
        set_event(client_write_.get(), false);
        to_client_.clear();  // socket and RDMA clients: undeliverable now
    }
    ring_full_ = false;  // SHM: stop waiting for the client to make room
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
        // Postgres left first (finish_after_flush): nothing more can go to it. A client
        // that still reads gets the rest of Postgres's output first (flush_client closes).
        if (!client_may_read_ || to_client_.empty())
            finish_departure("");
        return;
    }
    if (!upstream_shut_) {
        if (!drain_client_data() || state_ == SessionState::Closed)
            return;  // the upstream socket is full: on_upstream_writable() resumes
        // Everything is in Postgres's socket: let it read to the end, then EOF.
        (void)::shutdown(upstream_.get(), SHUT_WR);
        upstream_shut_ = true;
        if (rdma_) {
            // Nothing more can come from it: free the channel and leave the polling loop
            // (a peer-closed channel would keep the worker from ever blocking).
            rdma_.reset();
            worker_.set_polled(this, false);
        }
        update_upstream_reading();
    }
    if (upstream_eof_)
        finish_departure("");
}

// True once everything the client published has been handed to the upstream socket.
bool Session::drain_client_data() {
    if (upstream_refuses_)
        return true;  // Postgres closed its end: nothing more can reach it
    if (is_shm()) {
        (void)forward_ring_to_upstream();
        return state_ == SessionState::Forwarding && !upstream_blocked_ && to_upstream_.empty() &&
               !from_client_.has_data();
    }
    if (is_rdma()) {
        (void)forward_channel_to_upstream();
        return state_ == SessionState::Forwarding && !upstream_blocked_ && to_upstream_.empty() &&
               channel_exhausted_;
    }
    return drain_socket_client();
}

// Socket clients: what we read is in to_upstream_, what we did not is still in the
// socket (the kernel hands it out before it reports EOF or ECONNRESET).
bool Session::drain_socket_client() {
    for (;;) {
        flush_upstream();
        if (state_ != SessionState::Forwarding || upstream_blocked_)
            return false;
        if (client_eof_ || !client_.valid())
            return true;
        std::span<std::byte> space = to_upstream_.prepare(kClientChunk);
        const ssize_t n = stream_.recv(space.data(), space.size());
        const int err = errno;
        to_upstream_.commit(n > 0 ? static_cast<size_t>(n) : 0);
        if (n < 0 && err == EINTR)
            continue;
        if (n <= 0)
            client_eof_ = true;  // EOF, ECONNRESET, or EAGAIN from a client that cannot
                                 // receive any more: it sends nothing more either
    }
}

void Session::discard_upstream() {
    std::array<std::byte, kDiscardChunk> sink;
    for (int i = 0; i < kDiscardReads; ++i) {
        const ssize_t n = ::recv(upstream_.get(), sink.data(), sink.size(), MSG_DONTWAIT);
        if (n > 0)
            continue;
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

// The departed client's socket is readable: doorbell bytes to drop, or its end. EOF,
// ECONNRESET or EPIPE there mean the client closed it: the departure was an orderly one
// even if the channel failed first (see finish_departure()).
void Session::watch_departed_client() {
    size_t count = 0;
    const wait::DrainResult result = wait::drain_doorbells(client_.get(), count);
    if (result == wait::DrainResult::Drained)
        return;
    if (result == wait::DrainResult::PeerClosed || errno == ECONNRESET || errno == EPIPE)
        departure_error_ = false;
    client_eof_ = true;
    set_event(client_read_.get(), false);
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
