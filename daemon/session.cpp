#include "daemon/session.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cassert>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/client_end_socket.hpp"
#include "daemon/log_format.hpp"
#include "daemon/worker.hpp"

namespace l5pg::daemon {

std::string_view to_string(SessionState s) noexcept {
    switch (s) {
        case SessionState::Startup:
            return "startup";
        case SessionState::Connecting:
            return "connecting";
        case SessionState::Forwarding:
            return "forwarding";
        case SessionState::Refusing:
            return "refusing";
        case SessionState::Closed:
            return "closed";
    }
    return "?";
}

Session::Session(Worker& worker, uint64_t id, AcceptedClient client)
    : worker_(worker),
      metrics_(worker.metrics()),
      id_(id),
      transport_(client.listener),
      peer_(std::move(client.peer)),
      startup_slot_(std::move(client.startup_slot)),
      client_(std::move(client.fd)),
      stream_(client_.get()),
      end_(std::make_unique<SocketClientEnd>(stream_, *this)) {}

// Run by the worker's reap(), after the callback or polling round in which the session
// closed: only now are the segment unmapped, the RDMA channel destroyed and the sockets
// closed (members, in reverse order of declaration: events before the fds they watch).
Session::~Session() {
    if (record_)
        worker_.sessions().remove(id_);
    end_->reap(client_);
    // Closing a Unix socket drops what the client still had queued in it, descriptors it
    // passed with bytes nobody read included, and their last close must not run here
    // (foreign_fds.hpp). The events on it go first.
    // The client sees its end at once all the same (shutdown), however long that thread
    // takes.
    if (peer_.local && client_.valid()) {
        client_read_.reset();
        client_write_.reset();
        (void)::shutdown(client_.get(), SHUT_RDWR);
        worker_.foreign_fds().close_later(std::move(client_));
    }
}

void Session::enter(SessionState next) {
    // Closed is final; Refusing comes only before forwarding began; the rest in order.
    assert(state_ != SessionState::Closed);
    assert(next != SessionState::Refusing || state_ == SessionState::Startup ||
           state_ == SessionState::Connecting);
    // ... but for a pooled client not greeted yet that Postgres refused (make_room_for_login()).
    assert(next != SessionState::Connecting || state_ == SessionState::Startup ||
           (state_ == SessionState::Forwarding && pool_.greeting_reader));
    assert(next != SessionState::Forwarding || state_ == SessionState::Connecting);
    spdlog::trace("session {}: {} -> {}", id_, to_string(state_), to_string(next));
    state_ = next;
}

void Session::switch_end(std::unique_ptr<ClientEnd> end) {
    end_ = std::move(end);
    set_polled(end_->polled());
}

void Session::set_polled(bool on) {
    if (on != polled_) {
        polled_ = on;
        worker_.set_polled(this, on);
    }
}

void Session::start() {
    event_base* base = worker_.base();
    client_read_.reset(event_new(base, client_.get(), EV_READ | EV_PERSIST, client_read_cb, this));
    client_write_.reset(
        event_new(base, client_.get(), EV_WRITE | EV_PERSIST, client_write_cb, this));
    timer_.reset(evtimer_new(base, timer_cb, this));
    set_event(client_read_.get(), true);
    arm_timer(worker_.config().limits.startup_timeout_ms);
    spdlog::debug("session {}: accepted on {} listener from {}", id_, to_string(transport_),
                  peer_.describe());
}

void Session::set_event(event* ev, bool on) {
    if (ev == nullptr)
        return;
    const bool pending = event_pending(ev, EV_READ | EV_WRITE, nullptr) != 0;
    if (on && !pending)
        event_add(ev, nullptr);
    if (!on && pending)
        event_del(ev);
}

void Session::arm_timer(uint32_t ms) {
    const timeval tv = to_timeval(std::chrono::milliseconds(ms));
    evtimer_add(timer_.get(), &tv);
}

void Session::arm_timer_until(const wait::Deadline& deadline) {
    arm_timer(static_cast<uint32_t>(std::max(deadline.poll_ms(), 1)));
}

void Session::timer_cb(int, short, void* arg) {
    auto* self = static_cast<Session*>(arg);
    if (self->finish_when_ == FinishWhen::UpstreamClosed) {
        self->close(self->close_reason_ + " (Postgres did not close the connection in time)");
    } else if (self->pool_.room_wait != PoolState::RoomWait::None) {
        if (self->pool_.room_wait == PoolState::RoomWait::BackendEnding)
            spdlog::info(
                "session {}: the backend told to end did not close its connection in time; "
                "a new server connection is opened anyway",
                self->id_);
        self->reopen_upstream();
    } else if (self->pool_.login_check && self->pool_.login_check->purpose() ==
                                              protocol::PoolLoginCheck::Purpose::BeforeReuse) {
        self->refuse_reuse("no answer to the login check in time", /*answered=*/false);
    } else if (self->pool_.reset) {
        self->close(self->departure_reason_ +
                    "; the server connection's reset was not answered "
                    "in time: closed, not kept");
    } else if (self->client_gone_ && self->state_ == SessionState::Forwarding) {
        // Not everything reached Postgres (an error), or Postgres is still busy with it
        // (closing the upstream now changes nothing for the backend).
        self->departure_error_ = self->departure_error_ || !self->upstream_shut_;
        self->finish_departure(self->departure_timeout_reason(), /*timed_out=*/true);
    } else if (self->state_ == SessionState::Startup) {
        self->close("startup packet timeout", true);
    } else if (self->state_ == SessionState::Refusing) {
        // The startup timeout still runs: a client that does not take its FATAL in time
        // does not keep the session.
        self->close("the client did not take its FATAL in time", true);
    } else if (self->state_ == SessionState::Connecting && self->dial_.lookup.waiting()) {
        self->dial_.lookup.reset();
        self->fail_upstream_connect(0, "timeout expired");
    } else if (self->state_ == SessionState::Connecting && !self->upstream_.valid()) {
        self->connect_to_address();  // the retry after EAGAIN
    } else if (self->state_ == SessionState::Connecting) {
        self->next_upstream_address(0);
    }
    self->continue_departure();
}

void Session::client_read_cb(int, short, void* arg) {
    auto* self = static_cast<Session*>(arg);
    if (self->client_gone_) {
        self->worker_.note_activity();
        self->watch_departed_client();
    } else if (self->state_ == SessionState::Startup && !self->end_->polled()) {
        self->worker_.note_activity();
        self->on_startup_readable();  // the socket itself, before any upgrade
    } else {
        self->end_->on_socket_readable();
        // A doorbell that moved nothing (a poke, a client ringing for no reason) says no
        // request is coming: no reason to end the worker's idle stretch and spin again.
        if (self->pump())
            self->worker_.note_activity();
    }
    self->continue_departure();
}

void Session::client_write_cb(int, short, void* arg) {
    auto* self = static_cast<Session*>(arg);
    if (self->stream_.tls() && !self->stream_.handshake_done())
        self->continue_tls_handshake();
    else
        self->on_client_writable();
    self->continue_departure();
}

void Session::upstream_read_cb(int, short, void* arg) {
    auto* self = static_cast<Session*>(arg);
    self->worker_.note_activity();
    self->on_upstream_readable();
    self->continue_departure();
}

void Session::upstream_write_cb(int, short, void* arg) {
    auto* self = static_cast<Session*>(arg);
    self->worker_.note_activity();
    if (self->state_ == SessionState::Connecting)
        self->finish_connect_attempt();  // only a connect in progress watches for writing
    else
        self->on_upstream_writable();
    self->continue_departure();
}

bool Session::client_shares_sole_cpu(uint32_t worker_sole_cpu) noexcept {
    return end_->shares_sole_cpu(worker_sole_cpu);
}

uint32_t Session::client_cpu() noexcept {
    return end_->client_cpu();
}

bool Session::arm_before_block(uint64_t wait_id) {
    if (state_ == SessionState::Closed)
        return false;
    // Client data that cannot go anywhere (Postgres's socket is full, or Postgres refuses
    // more, or is not connected yet, or has not asked a passthrough client to authenticate)
    // must not keep the worker awake: the upstream socket wakes us.
    const bool input_wanted = !upstream_blocked_ && !upstream_refuses_ &&
                              state_ != SessionState::Connecting && !input_held_;
    return end_->arm_before_block(input_wanted, wait_id);
}

void Session::disarm_after_block() {
    end_->disarm_after_block();
}

// Like Postgres at a fast shutdown, tell the client why before hanging up, so applications
// and poolers can tell a shutdown from a crash. Only where it cannot break the client's
// framing (Postgres's last message complete) and never waiting: what does not fit into the
// socket buffer, the ring or the RDMA channel right now is not sent.
void Session::terminate_for_shutdown() {
    if (state_ == SessionState::Forwarding && !client_gone_ && !cancel_request_ &&
        finish_when_ == FinishWhen::Open && from_upstream_.at_boundary() && !end_->output_queued())
        end_->send_if_room(protocol::build_fatal(protocol::kSqlstateAdminShutdown,
                                                 "terminating connection due to "
                                                 "administrator command"));
    close("l5pgd is shutting down");
}

// A request is under way from its forwarding until its ReadyForQuery (the directory's
// "active", which also covers an answer streaming in), or until the answer's first bytes
// where there is no directory record.
std::optional<CancelKeys::Backend> Session::backend_of_running_request() const {
    if (state_ != SessionState::Forwarding || !upstream_.valid() || upstream_eof_ || admin_ ||
        cancel_request_ || !backend_key_)
        return std::nullopt;
    const bool active = record_ ? record_->active.load(std::memory_order_relaxed) : false;
    if (!active && !awaiting_upstream_)
        return std::nullopt;
    return CancelKeys::Backend{*backend_key_, upstream_address_};
}

std::string Session::describe() const {
    if (!record_)
        return fmt::format("{} over {}", peer_.describe(), to_string(transport_));
    return fmt::format("role {} database {}, {} over {}", quoted_name(record_->role),
                       quoted_name(record_->database), peer_.describe(), to_string(transport_));
}

// No client of Postgres's protocol passes descriptors (a backend's recv() would drop them);
// closing them here could stall the worker (foreign_fds.hpp).
void Session::client_passed_fds(wait::PassedFds& passed) {
    const size_t count = passed.count;
    worker_.foreign_fds().close_later(passed);
    close(fmt::format("client passed {} file descriptor{} on its socket (SCM_RIGHTS), which "
                      "l5pgd takes only with a shared-memory upgrade request",
                      count, count == 1 ? "" : "s"),
          true);
}

void Session::close(std::string_view reason, bool error) {
    if (state_ == SessionState::Closed)
        return;
    worker_.foreign_fds().close_later(std::move(passed_fd_));  // an upgrade's that never came
    const bool was_forwarding = state_ == SessionState::Forwarding;
    enter(SessionState::Closed);
    if (error)
        client_logs().session_error.log(spdlog::level::warn, "session {} ({}): closing: {}", id_,
                                        describe(), reason);
    else
        spdlog::debug("session {} ({}): closing: {}", id_, describe(), reason);
    end_->on_close(error, client_gone_);
    set_polled(false);
    startup_slot_.release();
    withdraw_wire_offer();
    wire_timer_.reset();
    if (counted_) {
        metrics_.session_closed(transport_);
        if (error && was_forwarding)
            metrics_.session_error(transport_);
    }
    if (database_counters_ != nullptr)
        database_counters_->closed(error && was_forwarding);
    // No callback may come any more. Everything else -- the mapping, the RDMA channel, the
    // sockets (then Postgres sees EOF and rolls back an open transaction) -- stays until
    // the worker reaps the session after the current callback (issue 21): whatever
    // called us, and whatever called that, may still look at the rings or the channel
    // before it sees state_ == Closed and stops.
    client_read_.reset();
    client_write_.reset();
    stream_.say_goodbye();
    upstream_read_.reset();
    upstream_write_.reset();
    timer_.reset();
    dial_.lookup.reset();
    worker_.retire(this);
}

}  // namespace l5pg::daemon
