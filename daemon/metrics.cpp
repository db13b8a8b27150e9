#include "daemon/metrics.hpp"

#include <fmt/format.h>

#include "daemon/prometheus_text.hpp"
#include "l5pg_version.hpp"

#include <algorithm>
#include <iterator>

namespace l5pg::daemon {

namespace {

constexpr std::array<Transport, kTransportCount> kTransports = {Transport::Tcp, Transport::Unix,
                                                                Transport::Shm, Transport::Rdma};

constexpr size_t idx(Transport t) noexcept {
    return static_cast<size_t>(t);
}

void bump(std::atomic<uint64_t>& counter, uint64_t n = 1) noexcept {
    counter.fetch_add(n, std::memory_order_relaxed);
}

uint64_t read(const std::atomic<uint64_t>& counter) noexcept {
    return counter.load(std::memory_order_relaxed);
}

using prometheus::header;

template <class T>
void per_transport(std::string& out, std::string_view name, std::string_view type,
                   std::string_view help, const std::array<std::atomic<T>, kTransportCount>& v) {
    header(out, name, type, help);
    for (Transport t : kTransports) {
        fmt::format_to(std::back_inserter(out), "{}{{transport=\"{}\"}} {}\n", name, to_string(t),
                       v[idx(t)].load(std::memory_order_relaxed));
    }
}

void scalar(std::string& out, std::string_view name, std::string_view help, uint64_t value) {
    header(out, name, "counter", help);
    fmt::format_to(std::back_inserter(out), "{} {}\n", name, value);
}

}  // namespace

std::string_view to_string(Transport t) noexcept {
    switch (t) {
        case Transport::Tcp:
            return "tcp";
        case Transport::Unix:
            return "unix";
        case Transport::Shm:
            return "shm";
        case Transport::Rdma:
            return "rdma";
    }
    return "unknown";
}

std::string_view to_string(ConnectionRefusal r) noexcept {
    switch (r) {
        case ConnectionRefusal::MaxSessions:
            return "max_sessions";
        case ConnectionRefusal::MaxStartupSessions:
            return "max_startup_sessions";
        case ConnectionRefusal::MaxStartupPerPeer:
            return "max_startup_per_peer";
        case ConnectionRefusal::ShuttingDown:
            return "shutting_down";
        case ConnectionRefusal::OutOfFds:
            return "out_of_fds";
    }
    return "unknown";
}

std::string_view to_string(CancelOutcome o) noexcept {
    switch (o) {
        case CancelOutcome::Forwarded:
            return "forwarded";
        case CancelOutcome::UnknownKey:
            return "unknown_key";
        case CancelOutcome::Rejected:
            return "rejected";
        case CancelOutcome::Throttled:
            return "throttled";
    }
    return "unknown";
}

std::string_view to_string(Direction d) noexcept {
    switch (d) {
        case Direction::ClientToServer:
            return "client_to_server";
        case Direction::ServerToClient:
            return "server_to_client";
    }
    return "unknown";
}

void Metrics::session_opened(Transport t) noexcept {
    bump(sessions_total_[idx(t)]);
    sessions_active_[idx(t)].fetch_add(1, std::memory_order_relaxed);
}

void Metrics::session_closed(Transport t) noexcept {
    sessions_active_[idx(t)].fetch_sub(1, std::memory_order_relaxed);
}

void Metrics::add_bytes(Transport t, Direction d, uint64_t n) noexcept {
    bump(d == Direction::ClientToServer ? bytes_c2s_[idx(t)] : bytes_s2c_[idx(t)], n);
}

void Metrics::upgrade_accepted() noexcept {
    bump(upgrades_accepted_);
}
void Metrics::upgrade_declined() noexcept {
    bump(upgrades_declined_);
}
void Metrics::session_error(Transport t) noexcept {
    bump(session_errors_[idx(t)]);
}
void Metrics::upstream_connect_failed() noexcept {
    bump(upstream_connect_failures_);
}
void Metrics::startup_rejected() noexcept {
    bump(startup_rejected_);
}
void Metrics::doorbell_sent() noexcept {
    bump(doorbells_);
}
void Metrics::doorbell_coalesced() noexcept {
    bump(doorbells_coalesced_);
}
void Metrics::doorbells_received(uint64_t n) noexcept {
    bump(doorbells_received_, n);
}
void Metrics::worker_blocked() noexcept {
    bump(worker_blocks_);
}
void Metrics::pool_returned() noexcept {
    bump(pool_returned_);
}
void Metrics::pool_reused() noexcept {
    bump(pool_reused_);
}
void Metrics::pool_reuse_refused() noexcept {
    bump(pool_reuse_refused_);
}
void Metrics::pool_ended_for_room() noexcept {
    bump(pool_ended_for_room_);
}
void Metrics::pool_idle_changed(int64_t delta) noexcept {
    pool_idle_.fetch_add(delta, std::memory_order_relaxed);
}
void Metrics::config_loaded(bool ok, std::chrono::system_clock::time_point when) noexcept {
    config_last_ok_.store(ok ? 1 : 0, std::memory_order_relaxed);
    if (ok)
        config_last_ok_at_.store(
            std::chrono::duration_cast<std::chrono::seconds>(when.time_since_epoch()).count(),
            std::memory_order_relaxed);
}
void Metrics::auth_failed(Transport t, AuthFailure reason) noexcept {
    bump(auth_failures_[idx(t)][static_cast<size_t>(reason)]);
}
void Metrics::connection_refused(ConnectionRefusal reason) noexcept {
    bump(refusals_[static_cast<size_t>(reason)]);
}

void Metrics::cancel_request(CancelOutcome outcome) noexcept {
    bump(cancels_[static_cast<size_t>(outcome)]);
}

void Metrics::observe_round_trip(Transport t, std::chrono::nanoseconds elapsed) noexcept {
    Histogram& h = round_trips_[idx(t)];
    const double seconds = std::chrono::duration<double>(elapsed).count();
    size_t b = 0;
    while (b < kRoundTripBuckets.size() && seconds > kRoundTripBuckets[b])
        ++b;
    bump(h.buckets[b]);  // non-cumulative here; render() adds them up
    bump(h.sum_ns, static_cast<uint64_t>(std::max<int64_t>(elapsed.count(), 0)));
}

TransportStats Metrics::stats(Transport t) const noexcept {
    const Histogram& h = round_trips_[idx(t)];
    uint64_t round_trips = 0;
    for (const auto& bucket : h.buckets)
        round_trips += read(bucket);
    return {read(sessions_total_[idx(t)]),
            sessions_active_[idx(t)].load(std::memory_order_relaxed),
            read(session_errors_[idx(t)]),
            read(bytes_c2s_[idx(t)]),
            read(bytes_s2c_[idx(t)]),
            round_trips,
            read(h.sum_ns)};
}

std::string Metrics::render() const {
    std::string out;
    out.reserve(4096);
    per_transport(out, "l5pg_sessions_total", "counter",
                  "Client sessions proxied (past their start-up).", sessions_total_);
    per_transport(out, "l5pg_sessions_active", "gauge", "Client sessions currently open.",
                  sessions_active_);

    header(out, "l5pg_bytes_total", "counter", "Bytes forwarded between clients and upstream.");
    for (Transport t : kTransports) {
        for (Direction d : {Direction::ClientToServer, Direction::ServerToClient}) {
            const auto& v = d == Direction::ClientToServer ? bytes_c2s_ : bytes_s2c_;
            fmt::format_to(std::back_inserter(out),
                           "l5pg_bytes_total{{transport=\"{}\",direction=\"{}\"}} {}\n",
                           to_string(t), to_string(d), read(v[idx(t)]));
        }
    }

    per_transport(out, "l5pg_session_errors_total", "counter", "Sessions closed by an error.",
                  session_errors_);

    header(out, "l5pg_upgrades_total", "counter",
           "L5 upgrade requests (shared memory and RDMA) by outcome.");
    fmt::format_to(std::back_inserter(out),
                   "l5pg_upgrades_total{{result=\"accepted\"}} {}\n"
                   "l5pg_upgrades_total{{result=\"declined\"}} {}\n",
                   read(upgrades_accepted_), read(upgrades_declined_));

    scalar(out, "l5pg_upstream_connect_failures_total", "Failed connections to the upstream.",
           read(upstream_connect_failures_));
    scalar(out, "l5pg_startup_rejected_total", "Malformed or oversized startup packets rejected.",
           read(startup_rejected_));
    scalar(out, "l5pg_doorbells_total", "Shared-memory doorbell wake-ups sent to clients.",
           read(doorbells_));
    scalar(out, "l5pg_doorbells_coalesced_total",
           "Shared-memory doorbells not sent: the client's wait had been rung on another of its "
           "sessions.",
           read(doorbells_coalesced_));
    scalar(out, "l5pg_doorbells_received_total",
           "Shared-memory doorbell bytes clients wrote to l5pgd's workers (wake-ups, pokes).",
           read(doorbells_received_));
    scalar(out, "l5pg_worker_blocks_total", "Times a worker stopped spinning and blocked.",
           read(worker_blocks_));
    scalar(out, "l5pg_pool_returned_total",
           "Server connections kept for the next client after their client left (pool.mode).",
           read(pool_returned_));
    scalar(out, "l5pg_pool_reused_total",
           "Client sessions served by a kept server connection instead of a new one.",
           read(pool_reused_));
    scalar(out, "l5pg_pool_reuse_refused_total",
           "Kept server connections closed instead of reused: Postgres would no longer log the "
           "client in as that backend's role and database.",
           read(pool_reuse_refused_));
    scalar(out, "l5pg_pool_ended_for_room_total",
           "Kept server connections ended because Postgres refused a new backend with 53300 "
           "(too many connections) while they were kept.",
           read(pool_ended_for_room_));
    header(out, "l5pg_pool_idle_connections", "gauge",
           "Server connections kept idle for the next client now.");
    fmt::format_to(std::back_inserter(out), "l5pg_pool_idle_connections {}\n",
                   pool_idle_.load(std::memory_order_relaxed));
    header(out, "l5pg_config_last_reload_successful", "gauge",
           "Whether the last reload (SIGHUP) took the configuration file (1 at start).");
    fmt::format_to(std::back_inserter(out), "l5pg_config_last_reload_successful {}\n",
                   config_last_ok_.load(std::memory_order_relaxed));
    header(out, "l5pg_config_last_reload_success_timestamp_seconds", "gauge",
           "When the configuration in use was loaded: at start or by the last reload that "
           "took it (Unix time).");
    fmt::format_to(std::back_inserter(out),
                   "l5pg_config_last_reload_success_timestamp_seconds {}\n",
                   config_last_ok_at_.load(std::memory_order_relaxed));
    render_refusals(out);
    render_round_trips(out);
    databases_.render(out);
    header(out, "l5pg_build_info", "gauge", "l5pgd's version (the value is always 1).");
    fmt::format_to(std::back_inserter(out), "l5pg_build_info{{version=\"{}\"}} 1\n", L5PG_VERSION);
    return out;
}

void Metrics::render_round_trips(std::string& out) const {
    header(out, "l5pg_upstream_round_trip_seconds", "histogram",
           "From forwarding a client's request to Postgres to Postgres's first answer byte.");
    for (Transport t : kTransports) {
        const Histogram& h = round_trips_[idx(t)];
        uint64_t cumulative = 0;
        for (size_t b = 0; b <= kRoundTripBuckets.size(); ++b) {
            cumulative += read(h.buckets[b]);
            const std::string le =
                b < kRoundTripBuckets.size() ? fmt::format("{}", kRoundTripBuckets[b]) : "+Inf";
            fmt::format_to(
                std::back_inserter(out),
                "l5pg_upstream_round_trip_seconds_bucket{{transport=\"{}\",le=\"{}\"}} {}\n",
                to_string(t), le, cumulative);
        }
        fmt::format_to(std::back_inserter(out),
                       "l5pg_upstream_round_trip_seconds_sum{{transport=\"{}\"}} {:.9f}\n"
                       "l5pg_upstream_round_trip_seconds_count{{transport=\"{}\"}} {}\n",
                       to_string(t), static_cast<double>(read(h.sum_ns)) / 1e9, to_string(t),
                       cumulative);
    }
}

void Metrics::render_refusals(std::string& out) const {
    header(out, "l5pg_auth_failures_total", "counter",
           "StartupMessages refused by l5pgd's client check (auth.*), by reason.");
    for (Transport t : kTransports) {
        for (size_t r = 1; r < kAuthFailureCount; ++r)  // 0 is AuthFailure::None
            fmt::format_to(std::back_inserter(out),
                           "l5pg_auth_failures_total{{transport=\"{}\",reason=\"{}\"}} {}\n",
                           to_string(t), to_string(static_cast<AuthFailure>(r)),
                           read(auth_failures_[idx(t)][r]));
    }
    header(out, "l5pg_connections_refused_total", "counter",
           "Connections refused before anything of them reached Postgres (at accept or at "
           "their StartupMessage), by reason.");
    for (size_t r = 0; r < kConnectionRefusalCount; ++r)
        fmt::format_to(std::back_inserter(out),
                       "l5pg_connections_refused_total{{reason=\"{}\"}} {}\n",
                       to_string(static_cast<ConnectionRefusal>(r)), read(refusals_[r]));
    header(out, "l5pg_cancel_requests_total", "counter",
           "CancelRequests: forwarded to Postgres, or not (unknown_key: no session of l5pgd "
           "holds the key; rejected: auth.* is reject for the client's listener; throttled: "
           "not looked up, over limits.wrong_cancel_keys_per_second*).");
    for (size_t r = 0; r < kCancelOutcomeCount; ++r)
        fmt::format_to(std::back_inserter(out), "l5pg_cancel_requests_total{{result=\"{}\"}} {}\n",
                       to_string(static_cast<CancelOutcome>(r)), read(cancels_[r]));
}

}  // namespace l5pg::daemon
