// l5pgd's main loop: listeners, the acceptor, the workers and signal handling.
//   SIGTERM, SIGQUIT: immediate shutdown (sessions closed; Postgres rolls back).
//   SIGINT: graceful: stop accepting, wait for sessions to end; a second signal forces.
//   SIGHUP: reload the configuration (daemon/reload.hpp); sessions carry on.
// Under systemd (Type=notify) it reports its state through ServiceManager.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "config/config.hpp"
#include "daemon/admission.hpp"
#include "daemon/event_ptr.hpp"
#include "daemon/fd_reserve.hpp"
#include "daemon/health.hpp"
#include "daemon/listener.hpp"
#include "daemon/log_limiter.hpp"
#include "daemon/loop_rounds.hpp"
#include "daemon/metrics.hpp"
#include "daemon/rdma_wire.hpp"
#include "daemon/reload.hpp"
#include "daemon/service_manager.hpp"
#include "daemon/settings.hpp"
#include "daemon/worker.hpp"

struct evconnlistener;

namespace l5pg::daemon {

class Server {
  public:
    // Binds the listeners and starts the workers; throws std::runtime_error on failure.
    // `source` is read again on SIGHUP; `health` is kept up to date for /healthz.
    Server(SettingsPtr settings, ConfigSource source, Metrics& metrics, Health& health);
    ~Server();
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    // Runs until shutdown. Returns the process exit code.
    int run();

  private:
    struct Acceptor;
    static void accept_cb(evconnlistener* listener, int fd, sockaddr* addr, int len, void* arg);
    static void signal_cb(int sig, short what, void* arg);
    static void drain_cb(int fd, short what, void* arg);
    static void accept_error_cb(evconnlistener* listener, void* arg);
    static void accept_resume_cb(int fd, short what, void* arg);
    static void heartbeat_cb(int fd, short what, void* arg);
    void heartbeat();
    void on_accept_error(int err);
    void pause_accepting();
    void log_accept_recovered();
    void accept_client(int fd, Transport transport);
    [[nodiscard]] std::optional<ConnectionRefusal> admit(AcceptedClient& client);
    void refuse_connection(const AcceptedClient& client, ConnectionRefusal refusal);
    void begin_graceful_shutdown();
    void reload();
    [[nodiscard]] std::string status() const;
    [[nodiscard]] bool workers_responsive(std::chrono::microseconds allowed_stall);
    [[nodiscard]] const config::Config& config() const noexcept { return settings_->config; }
    void stop_accepting();
    void stop_workers();
    [[nodiscard]] size_t active_sessions() const;
    [[nodiscard]] bool draining() const noexcept {
        return admission_.draining.load(std::memory_order_relaxed);
    }

    const ConfigSource source_;
    SettingsPtr settings_;  // the main thread's snapshot, the one last published
    SettingsStore store_;   // where the workers take theirs
    Metrics& metrics_;
    Health& health_;
    AdmissionState admission_;
    LogLimiter accept_error_log_;
    LogLimiter accept_recovered_log_;
    bool accept_failing_ = false;        // since the last accept() failure, none succeeded
    FdReserve fd_reserve_;               // taken before any listener or worker opens its fds
    uint64_t fd_refusals_unlogged_ = 0;  // refused with fd_reserve_, not yet in the log
    EventBasePtr base_;
    ServiceManager service_;
    std::unique_ptr<UnixListener> unix_listener_;
    std::unique_ptr<TcpListener> tcp_listener_;
    WireRegistry wire_registry_;  // before the workers, which use it
    std::unique_ptr<SoftWireListener> soft_wire_;
    std::vector<std::unique_ptr<Acceptor>> acceptors_;
    std::vector<std::unique_ptr<Worker>> workers_;
    std::vector<EventPtr> signal_events_;
    EventPtr drain_timer_;
    EventPtr accept_resume_;  // re-enables the listeners after an accept() failure
    LoopRounds heartbeat_rounds_;
    std::vector<Health::clock::time_point> worker_seen_;  // last seen going round, by a beat
    EventPtr heartbeat_timer_;
};

}  // namespace l5pg::daemon
