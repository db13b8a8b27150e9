// l5pgd's counters and their Prometheus text rendering. Lock-free: workers bump relaxed
// atomics, the metrics thread reads them.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/auth_failure.hpp"
#include "daemon/database_metrics.hpp"

namespace l5pg::daemon {

enum class Transport { Tcp, Unix, Shm, Rdma };
inline constexpr size_t kTransportCount = 4;
[[nodiscard]] std::string_view to_string(Transport t) noexcept;  // "tcp", "unix", "shm", "rdma"

enum class Direction { ClientToServer, ServerToClient };
[[nodiscard]] std::string_view to_string(Direction d) noexcept;  // "client_to_server", ...

// Why a connection was refused before anything of it reached Postgres: by the acceptor
// before its startup was read, or (max_sessions, shutting_down) at its StartupMessage.
enum class ConnectionRefusal {
    MaxSessions,
    MaxStartupSessions,
    MaxStartupPerPeer,
    ShuttingDown,
    OutOfFds
};
inline constexpr size_t kConnectionRefusalCount = 5;
// "max_sessions", "max_startup_sessions", "max_startup_per_peer", "shutting_down",
// "out_of_fds"
[[nodiscard]] std::string_view to_string(ConnectionRefusal r) noexcept;

// What became of a CancelRequest: forwarded to Postgres with the backend's key, or not
// (a key no session of l5pgd holds; the client's listener is auth.*: reject; not looked up,
// over limits.wrong_cancel_keys_per_second*).
enum class CancelOutcome { Forwarded, UnknownKey, Rejected, Throttled };
inline constexpr size_t kCancelOutcomeCount = 4;
[[nodiscard]] std::string_view to_string(CancelOutcome o) noexcept;  // "forwarded", ...

// One transport's totals, as the admin console's SHOW STATS lists them.
struct TransportStats {
    uint64_t sessions_total = 0;
    int64_t sessions_active = 0;
    uint64_t session_errors = 0;
    uint64_t bytes_from_clients = 0;
    uint64_t bytes_to_clients = 0;
    uint64_t round_trips = 0;  // the round-trip histogram's count and sum
    uint64_t round_trip_ns = 0;
};

class Metrics {
  public:
    void session_opened(Transport t) noexcept;
    void session_closed(Transport t) noexcept;
    void add_bytes(Transport t, Direction d, uint64_t n) noexcept;
    void upgrade_accepted() noexcept;
    void upgrade_declined() noexcept;
    void session_error(Transport t) noexcept;  // a session closed because of an error
    void upstream_connect_failed() noexcept;
    void startup_rejected() noexcept;    // garbage / oversized startup packet
    void doorbell_sent() noexcept;       // SHM wake-ups written to clients
    void doorbell_coalesced() noexcept;  // ... not written: the client's wait was rung already
    void doorbells_received(uint64_t n) noexcept;  // SHM wake-ups clients wrote to a worker
    void worker_blocked() noexcept;                // a worker gave up spinning and blocked
    // Session pool (upstream_pool.hpp): a server connection kept after its client left, given
    // to a new client, and the change in how many are kept idle now.
    void pool_returned() noexcept;
    void pool_reused() noexcept;
    void pool_reuse_refused() noexcept;
    void pool_ended_for_room() noexcept;  // a kept one ended for a login Postgres refused (53300)
    void pool_idle_changed(int64_t delta) noexcept;
    void auth_failed(Transport t, AuthFailure reason) noexcept;
    void connection_refused(ConnectionRefusal reason) noexcept;
    void cancel_request(CancelOutcome outcome) noexcept;
    // From forwarding a request to Postgres to its first answer byte, as l5pgd sees it.
    void observe_round_trip(Transport t, std::chrono::nanoseconds elapsed) noexcept;
    // The configuration was loaded (at start: ok) or a reload (SIGHUP) took it or not, at
    // `when` (Unix time).
    void config_loaded(bool ok, std::chrono::system_clock::time_point when) noexcept;
    [[nodiscard]] int64_t sessions_active(Transport t) const noexcept {
        return sessions_active_[static_cast<size_t>(t)].load(std::memory_order_relaxed);
    }
    [[nodiscard]] TransportStats stats(Transport t) const noexcept;
    // The per-database series (metrics.labels), rendered after these.
    [[nodiscard]] DatabaseMetrics& databases() noexcept { return databases_; }

    // Prometheus text exposition format 0.0.4, with HELP and TYPE lines:
    //   l5pg_sessions_total{transport}            counter
    //   l5pg_sessions_active{transport}           gauge
    //   l5pg_bytes_total{transport,direction}     counter
    //   l5pg_session_errors_total{transport}      counter
    //   l5pg_upgrades_total{result="accepted|declined"} counter
    //   l5pg_upstream_connect_failures_total, l5pg_startup_rejected_total,
    //   l5pg_doorbells_total, l5pg_doorbells_coalesced_total,
    //   l5pg_doorbells_received_total, l5pg_worker_blocks_total   counters
    //   l5pg_pool_returned_total, l5pg_pool_reused_total,
    //   l5pg_pool_reuse_refused_total, l5pg_pool_ended_for_room_total counters
    //   l5pg_pool_idle_connections                                gauge
    //   l5pg_auth_failures_total{transport,reason}        counter
    //   l5pg_connections_refused_total{reason}            counter
    //   l5pg_cancel_requests_total{result}                counter
    //   l5pg_upstream_round_trip_seconds{transport}       histogram
    //   l5pg_config_last_reload_successful                gauge, 1 or 0
    //   l5pg_config_last_reload_success_timestamp_seconds gauge
    //   l5pg_build_info{version}                          gauge, always 1
    // and DatabaseMetrics' series when metrics.labels asks for them.
    [[nodiscard]] std::string render() const;

    // Upper bounds of the round-trip histogram's buckets, in seconds (+Inf follows).
    static constexpr std::array<double, 14> kRoundTripBuckets{
        0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
        0.01,    0.025,  0.05,    0.1,    0.25,  1.0,    5.0};

  private:
    void render_refusals(std::string& out) const;
    void render_round_trips(std::string& out) const;
    template <class T>
    using PerTransport = std::array<std::atomic<T>, kTransportCount>;
    PerTransport<uint64_t> sessions_total_{};
    PerTransport<int64_t> sessions_active_{};
    PerTransport<uint64_t> bytes_c2s_{};
    PerTransport<uint64_t> bytes_s2c_{};
    PerTransport<uint64_t> session_errors_{};
    std::atomic<uint64_t> upgrades_accepted_{0};
    std::atomic<uint64_t> upgrades_declined_{0};
    std::atomic<uint64_t> upstream_connect_failures_{0};
    std::atomic<uint64_t> startup_rejected_{0};
    std::atomic<uint64_t> doorbells_{0};
    std::atomic<uint64_t> doorbells_coalesced_{0};
    std::atomic<uint64_t> doorbells_received_{0};
    std::atomic<uint64_t> worker_blocks_{0};
    std::atomic<uint64_t> pool_returned_{0};
    std::atomic<uint64_t> pool_reused_{0};
    std::atomic<uint64_t> pool_reuse_refused_{0};
    std::atomic<uint64_t> pool_ended_for_room_{0};
    std::atomic<int64_t> pool_idle_{0};
    std::atomic<int> config_last_ok_{1};
    std::atomic<int64_t> config_last_ok_at_{0};  // Unix time, seconds
    std::array<std::array<std::atomic<uint64_t>, kAuthFailureCount>, kTransportCount>
        auth_failures_{};
    std::array<std::atomic<uint64_t>, kConnectionRefusalCount> refusals_{};
    std::array<std::atomic<uint64_t>, kCancelOutcomeCount> cancels_{};
    struct Histogram {
        std::array<std::atomic<uint64_t>, kRoundTripBuckets.size() + 1> buckets{};  // last: +Inf
        std::atomic<uint64_t> sum_ns{0};
    };
    std::array<Histogram, kTransportCount> round_trips_{};
    DatabaseMetrics databases_;
};

}  // namespace l5pg::daemon
