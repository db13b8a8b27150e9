#include "daemon/server.hpp"

#include <event2/listener.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/fd_limit.hpp"
#include "daemon/process_signals.hpp"
#include "daemon/upstream.hpp"
#include "protocol/error_response.hpp"
#include "transport/shm/segment.hpp"
#include "transport/wait/passed_fds.hpp"

namespace l5pg::daemon {
namespace {

// Waiting connections refused with the spare descriptors per listener and pause: the listen
// queue empties in a few pauses, and a pause's work stays small.
constexpr size_t kRefusalsPerPause = 64;

EventBasePtr make_main_base() {
    EventBasePtr base(event_base_new());
    if (!base)
        throw std::runtime_error("cannot create the main libevent base");
    return base;
}

std::string suppressed_note(uint64_t suppressed) {
    return suppressed > 0 ? fmt::format(" ({} similar messages not logged)", suppressed)
                          : std::string();
}

}  // namespace

struct Server::Acceptor {
    Server* server;
    Transport transport;
    evconnlistener* listener = nullptr;
    ~Acceptor() {
        if (listener != nullptr)
            evconnlistener_free(listener);
    }
};

Server::Server(SettingsPtr settings, ConfigSource source, Metrics& metrics, Health& health)
    : source_(std::move(source)),
      settings_(std::move(settings)),
      store_(settings_),
      metrics_(metrics),
      health_(health),
      admission_(config().limits),
      base_(make_main_base()),
      service_(
          base_.get(), [this] { return status(); },
          [this](std::chrono::microseconds allowed) { return workers_responsive(allowed); }) {
    metrics_.config_loaded(true, std::chrono::system_clock::now());
    const config::Config& config = this->config();
    const auto& listen = config.listen;
    if (!listen.unix_socket_dir.empty())
        unix_listener_ = std::make_unique<UnixListener>(listen.unix_socket_dir, listen.port,
                                                        listen.backlog, listen.unix_socket_mode);
    if (!listen.tcp_address.empty())
        tcp_listener_ =
            std::make_unique<TcpListener>(listen.tcp_address, listen.port, listen.backlog);
    RdmaShared rdma;
    if (config.rdma.enabled && config.rdma.device == "soft" && tcp_listener_) {
        soft_wire_ = std::make_unique<SoftWireListener>(
            base_.get(), listen.tcp_address, config.rdma.soft_port, listen.backlog, wire_registry_,
            config.limits.max_sessions);  // each legitimate wire belongs to a session
        rdma = RdmaShared{&wire_registry_, soft_wire_->port()};
    }
    for (unsigned i = 0; i < config.workers.count; ++i)
        workers_.push_back(std::make_unique<Worker>(i, store_, metrics, admission_, rdma));
    if (config.rdma.enabled && !workers_.empty()) {
        if (workers_.front()->rdma_endpoint() == nullptr)
            spdlog::warn("rdma: upgrades will be declined (clients stay on TCP): {}",
                         workers_.front()->rdma_unavailable());
        else if (soft_wire_)
            spdlog::info(
                "rdma: soft device (an emulation for tests; its numbers say nothing "
                "about RDMA), wire connections on port {}",
                soft_wire_->port());
        else
            spdlog::info("rdma: device {}", workers_.front()->rdma_device_name());
    }

    auto add_acceptor = [this](int fd, Transport transport) {
        auto acceptor = std::make_unique<Acceptor>(Acceptor{this, transport});
        // The listener fd stays owned by UnixListener/TcpListener (no LEV_OPT_CLOSE_ON_FREE).
        // Backlog 0: the socket listens already with listen.backlog (-1 would make libevent
        // call listen() again with its own 128).
        acceptor->listener = evconnlistener_new(base_.get(), accept_cb, acceptor.get(),
                                                LEV_OPT_CLOSE_ON_EXEC, 0, fd);
        if (acceptor->listener == nullptr)
            throw std::runtime_error("evconnlistener_new failed");
        evconnlistener_set_error_cb(acceptor->listener, accept_error_cb);
        acceptors_.push_back(std::move(acceptor));
    };
    if (unix_listener_)
        add_acceptor(unix_listener_->fd(), Transport::Unix);
    if (tcp_listener_)
        add_acceptor(tcp_listener_->fd(), Transport::Tcp);

    accept_resume_.reset(evtimer_new(base_.get(), accept_resume_cb, this));
    for (const int sig : kProcessSignals) {
        signal_events_.emplace_back(evsignal_new(base_.get(), sig, signal_cb, this));
        evsignal_add(signal_events_.back().get(), nullptr);
    }
    release_held_signals();
}

Server::~Server() {
    stop_accepting();
    stop_workers();
}

// All at once: each may wait for its lingering RDMA channels (rdma.completion_timeout_ms),
// and the clients of the last worker should get their 57P01 as soon as the first's.
void Server::stop_workers() {
    for (auto& worker : workers_)
        worker->request_stop();
    for (size_t i = 0; i < workers_.size(); ++i) {
        health_.joining(static_cast<int>(i));
        workers_[i]->join();
    }
    health_.joining(-1);  // what is left of the stop is the main thread's
}

int Server::run() {
    for (auto& worker : workers_)
        worker->start();
    const bool rdma_ready = !workers_.empty() && workers_.front()->rdma_endpoint() != nullptr;
    // Ready for /readyz before the log line and READY=1 say so (tests and scripts wait for
    // either).
    health_.started(Health::clock::now());
    spdlog::info("l5pgd ready: unix socket {}, tcp {}, upstream {}, {} workers, shm {}, rdma {}",
                 unix_listener_ ? unix_listener_->path() : "(disabled)",
                 tcp_listener_ ? tcp_listener_->description() : "(disabled)",
                 describe_upstream(config().upstream), workers_.size(),
                 config().shm.enabled ? "enabled" : "disabled",
                 !config().rdma.enabled ? "disabled"
                 : rdma_ready           ? "enabled"
                                        : "unavailable");
    if (config().shm.enabled && !shm::server_seals_supported())
        spdlog::warn(
            "shm is enabled, but this kernel refuses F_SEAL_FUTURE_WRITE (Linux 5.1 and later "
            "have it): every shared-memory upgrade will be declined, clients stay on the socket");
    service_.ready();
    heartbeat_timer_.reset(event_new(base_.get(), -1, EV_PERSIST, heartbeat_cb, this));
    const timeval every =
        to_timeval(std::chrono::duration_cast<std::chrono::microseconds>(Health::kBeatInterval));
    event_add(heartbeat_timer_.get(), &every);
    event_base_dispatch(base_.get());
    // No more beats: the workers may take a while to stop (close_all: one completion timeout
    // for the RDMA sessions' last writes), not for ever (/healthz).
    health_.stopping(Health::clock::now(),
                     config().rdma.enabled
                         ? std::chrono::milliseconds(config().rdma.completion_timeout_ms)
                         : Health::clock::duration::zero());
    service_.stopping();
    stop_accepting();
    stop_workers();
    spdlog::info("l5pgd stopped");
    return 0;
}

void Server::accept_cb(evconnlistener*, int fd, sockaddr*, int, void* arg) {
    auto* acceptor = static_cast<Acceptor*>(arg);
    acceptor->server->accept_client(fd, acceptor->transport);
}

void Server::accept_client(int fd, Transport transport) {
    if (accept_failing_) {
        accept_failing_ = false;
        log_accept_recovered();
    }
    AcceptedClient client{
        UniqueFd(fd), transport, identify_peer(fd, transport == Transport::Unix), {}};
    if (transport == Transport::Tcp) {
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        // The kernel's keepalive times, as Postgres (tcp_keepalives_*) and PgBouncer
        // (tcp_keepalive) by default: a client whose host went away while its session
        // idled (in a transaction, holding locks) is found out, and SIGINT's drain ends.
        ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    } else {
        wait::read_out_of_band_inline(fd);  // descriptors passed on MSG_OOB: passed_fds.hpp
    }
    if (const std::optional<ConnectionRefusal> refusal = admit(client)) {
        refuse_connection(client, *refusal);
        if (transport == Transport::Unix)  // descriptors it may have queued: not on this thread
            admission_.foreign_fds.close_later(std::move(client.fd));
        return;
    }
    auto least_busy = std::min_element(
        workers_.begin(), workers_.end(),
        [](const auto& a, const auto& b) { return a->session_count() < b->session_count(); });
    (*least_busy)->hand_over(std::move(client));
}

// Checks the limits that apply before a byte is read; takes the client's startup slot.
// limits.max_sessions is answered later, at the StartupMessage (daemon/session_cap.hpp).
std::optional<ConnectionRefusal> Server::admit(AcceptedClient& client) {
    StartupLimiter::Refusal refusal = StartupLimiter::Refusal::None;
    client.startup_slot = admission_.startup.try_acquire(client.peer.limit_key(), refusal);
    if (refusal == StartupLimiter::Refusal::Total)
        return ConnectionRefusal::MaxStartupSessions;
    if (refusal == StartupLimiter::Refusal::PerPeer)
        return ConnectionRefusal::MaxStartupPerPeer;
    return std::nullopt;
}

// Answers with a PostgreSQL error (the socket is fresh: the whole message fits in its
// buffer) and closes. Logged through the shared limiter, with a count of what was not.
void Server::refuse_connection(const AcceptedClient& client, ConnectionRefusal refusal) {
    metrics_.connection_refused(refusal);
    const std::string message = too_many_connections_message(refusal);
    const auto error = protocol::build_fatal(protocol::kSqlstateTooManyConnections, message);
    (void)!::send(client.fd.get(), error.data(), error.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    client_logs().refused_connection.log(
        spdlog::level::warn, "refused a connection from {} ({}): {}", client.peer.describe(),
        to_string(client.listener), message);
}

void Server::accept_error_cb(evconnlistener*, void* arg) {
    const int err = EVUTIL_SOCKET_ERROR();
    auto* acceptor = static_cast<Acceptor*>(arg);
    acceptor->server->on_accept_error(err);
}

// libevent calls accept() again on every loop turn while a connection waits, and without
// descriptors each call fails at once: a busy loop (and, before this callback existed, a
// log line per call). So stop listening for kAcceptPause, and meanwhile tell the waiting
// clients why with the spare descriptors (daemon/fd_reserve.hpp) instead of letting them hang.
void Server::on_accept_error(int err) {
    accept_failing_ = true;
    pause_accepting();
    const bool out_of_fds = err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
    size_t refused = 0;
    if (out_of_fds) {
        static const std::vector<std::byte> error =
            protocol::build_fatal(protocol::kSqlstateTooManyConnections,
                                  "l5pgd: too many connections (l5pgd is out of file descriptors)");
        for (const auto& acceptor : acceptors_)
            refused += fd_reserve_.refuse_waiting(evconnlistener_get_fd(acceptor->listener), error,
                                                  kRefusalsPerPause);
        for (size_t i = 0; i < refused; ++i)
            metrics_.connection_refused(ConnectionRefusal::OutOfFds);
        fd_refusals_unlogged_ += refused;
    }
    if (const std::optional<uint64_t> suppressed =
            accept_error_log_.admit(std::chrono::steady_clock::now())) {
        spdlog::warn(
            "accept() failed: {}{}; not accepting for {} ms at a time until it succeeds, {} "
            "waiting connections refused with SQLSTATE 53300 since the last message{}",
            std::strerror(err), out_of_fds ? " (open file limit reached)" : "",
            kAcceptPause.tv_usec / 1000, fd_refusals_unlogged_, suppressed_note(*suppressed));
        fd_refusals_unlogged_ = 0;
    }
}

void Server::log_accept_recovered() {
    if (const std::optional<uint64_t> suppressed =
            accept_recovered_log_.admit(std::chrono::steady_clock::now())) {
        spdlog::info(
            "accepting connections again; {} refused for want of descriptors since "
            "the last message{}",
            fd_refusals_unlogged_, suppressed_note(*suppressed));
        fd_refusals_unlogged_ = 0;
    }
}

void Server::pause_accepting() {
    for (const auto& acceptor : acceptors_)
        evconnlistener_disable(acceptor->listener);
    evtimer_add(accept_resume_.get(), &kAcceptPause);
}

void Server::accept_resume_cb(int, short, void* arg) {
    auto* self = static_cast<Server*>(arg);
    (void)self->fd_reserve_.refill();
    for (const auto& acceptor : self->acceptors_)  // none once stop_accepting() ran
        evconnlistener_enable(acceptor->listener);
}

size_t Server::active_sessions() const {
    size_t total = 0;
    for (const auto& worker : workers_)
        total += worker->session_count();
    return total;
}

void Server::signal_cb(int sig, short, void* arg) {
    auto* self = static_cast<Server*>(arg);
    if (sig == SIGHUP) {
        self->reload();
        return;
    }
    if (sig == SIGUSR1 || sig == SIGUSR2) {
        // PgBouncer's PAUSE and RESUME: an operator used to them must not stop l5pgd (the
        // signals' default action) with every session in it.
        spdlog::warn(
            "received {}: ignored (l5pgd has no PAUSE or RESUME; SIGINT drains, "
            "SIGTERM stops, SIGHUP reloads)",
            sig == SIGUSR1 ? "SIGUSR1" : "SIGUSR2");
        return;
    }
    if (sig == SIGINT && !self->draining()) {
        // Not STOPPING=1 yet (STATUS= says "draining"): systemd would take it for the start of
        // a stop and SIGKILL l5pgd TimeoutStopSec later. A drain `systemctl stop` begins is
        // bounded by the unit's ExecStop; one begun by hand lasts until its sessions end.
        self->begin_graceful_shutdown();
        return;
    }
    self->service_.stopping();
    spdlog::info("received signal {}: shutting down now", sig);
    event_base_loopbreak(self->base_.get());
}

// On the main thread, between callbacks: the acceptor's own snapshot changes here, the
// workers' at their next safe point (Worker::refresh_settings).
void Server::reload() {
    spdlog::info("SIGHUP: reloading the configuration{}",
                 source_.path.empty() ? std::string() : " from " + source_.path);
    service_.reloading();
    const uint64_t answered = admission_.reloads.begin();
    ReloadLedger::Outcome outcome;
    SettingsPtr next = reload_settings(source_, *settings_, outcome);
    metrics_.config_loaded(next != nullptr, std::chrono::system_clock::now());
    outcome.applied = next != nullptr;
    if (outcome.applied) {
        settings_ = std::move(next);
        apply_process_settings(config());
        raise_fd_limit(config());
        admission_.startup.set_caps(config().limits.max_startup_sessions,
                                    config().limits.max_startup_per_peer);
        admission_.cancel_guesses.set_rates(config().limits.wrong_cancel_keys_per_second,
                                            config().limits.wrong_cancel_keys_per_second_per_peer);
        store_.publish(settings_);
        spdlog::info("reload: done");
    }
    // The workers take the new settings, and their consoles' RELOADs get the outcome.
    admission_.reloads.finish(answered, std::move(outcome));
    for (auto& worker : workers_)
        worker->wake();
    service_.reloaded();
}

// For the systemd watchdog: whether every worker went round its loop since the last call
// (half a WatchdogSec ago). One that did not is stuck in a callback, and l5pgd should be
// restarted rather than pinged for.
// As of the last heartbeat (same thread, every kBeatInterval): when each worker was last
// seen going round its loop. Two beats at least: a worker seen at the last beat counts.
bool Server::workers_responsive(std::chrono::microseconds allowed_stall) {
    const auto now = Health::clock::now();
    const auto allowed =
        std::max<Health::clock::duration>(allowed_stall, 2 * Health::kBeatInterval);
    bool responsive = true;
    for (size_t i = 0; i < worker_seen_.size(); ++i) {
        if (now - worker_seen_[i] <= allowed)
            continue;
        responsive = false;
        spdlog::error(
            "worker {} has not gone round its loop for {} s: no watchdog ping", i,
            std::chrono::duration_cast<std::chrono::seconds>(now - worker_seen_[i]).count());
    }
    return responsive;
}

void Server::heartbeat_cb(int, short, void* arg) {
    static_cast<Server*>(arg)->heartbeat();
}

// Every kBeatInterval: the tail of a flood of client-caused log lines, and what /healthz
// reports (daemon/health.hpp): when each worker was last seen going round, as of this beat;
// the beat itself shows the main loop goes round.
void Server::heartbeat() {
    const Health::clock::time_point now = Health::clock::now();
    client_logs().report_unlogged(now);
    worker_seen_.resize(workers_.size(), now);
    const std::vector<size_t> stuck = heartbeat_rounds_.stalled(workers_);
    for (size_t i = 0; i < worker_seen_.size(); ++i)
        if (std::find(stuck.begin(), stuck.end(), i) == stuck.end())
            worker_seen_[i] = now;
    const auto laggard = std::min_element(worker_seen_.begin(), worker_seen_.end());
    if (laggard == worker_seen_.end())
        health_.beat(now, now, -1);
    else
        health_.beat(now, *laggard, static_cast<int>(laggard - worker_seen_.begin()));
}

// For systemd's STATUS=: what `systemctl status l5pgd` shows. The sessions past their start-up
// by transport, their sum, then those still starting (counted apart, not twice).
std::string Server::status() const {
    const auto shm = metrics_.sessions_active(Transport::Shm);
    const auto unix_ = metrics_.sessions_active(Transport::Unix);
    const auto tcp = metrics_.sessions_active(Transport::Tcp);
    const auto rdma = metrics_.sessions_active(Transport::Rdma);
    return fmt::format("sessions: {} (shm {}, unix {}, tcp {}, rdma {}), in startup: {}{}",
                       shm + unix_ + tcp + rdma, shm, unix_, tcp, rdma,
                       admission_.startup.in_startup(), draining() ? "; draining" : "");
}

// The listeners stay open: a client whose query runs on must still be able to cancel it, and
// a new client learns why it is refused (57P03) instead of finding no socket.
void Server::begin_graceful_shutdown() {
    admission_.draining.store(true, std::memory_order_relaxed);
    admission_.wakers.wake_all();  // they end the server connections they keep
    health_.draining();
    spdlog::info(
        "SIGINT: new sessions refused; waiting for {} sessions to end "
        "(send SIGTERM or SIGINT again to stop now)",
        active_sessions());
    drain_timer_.reset(event_new(base_.get(), -1, EV_PERSIST, drain_cb, this));
    const timeval every{0, 100 * 1000};
    event_add(drain_timer_.get(), &every);
}

// Done once every session that got past its StartupMessage has ended: one that has not sent
// it yet (an idle connection, a client retrying through the drain) holds nothing up, nor
// does an admin console session (a monitoring agent's, an operator's watching the drain):
// those get their 57P01 when l5pgd stops, as at SIGTERM.
void Server::drain_cb(int, short, void* arg) {
    auto* self = static_cast<Server*>(arg);
    if (self->active_sessions() <=
        self->admission_.startup.in_startup() + self->admission_.consoles.taken())
        event_base_loopbreak(self->base_.get());
}

void Server::stop_accepting() {
    if (accept_resume_)
        evtimer_del(accept_resume_.get());
    acceptors_.clear();
    unix_listener_.reset();  // removes the socket and the marker file
    tcp_listener_.reset();
    soft_wire_.reset();
}

}  // namespace l5pg::daemon
