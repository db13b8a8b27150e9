#include "daemon/admin_query.hpp"

#include <algorithm>
#include <cctype>
#include <ctime>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "config/reload_keys.hpp"
#include "daemon/utf8_text.hpp"
#include "l5pg_version.hpp"
#include "protocol/error_response.hpp"

namespace l5pg::daemon {
namespace {

using Row = std::vector<std::optional<std::string>>;

// "  show   Sessions ; " -> "show sessions"
std::string normalize(std::string_view sql) {
    std::string out;
    bool space = false;
    for (const char c : sql) {
        if (std::isspace(static_cast<unsigned char>(c))) {
            space = !out.empty();
            continue;
        }
        if (space)
            out += ' ';
        space = false;
        out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    while (!out.empty() && (out.back() == ';' || out.back() == ' '))
        out.pop_back();
    return out;
}

std::string seconds_since(int64_t then_ns, std::chrono::steady_clock::time_point now) {
    const int64_t ns = now.time_since_epoch().count() - then_ns;
    return fmt::format("{:.3f}", static_cast<double>(std::max<int64_t>(ns, 0)) / 1e9);
}

std::string iso_time(std::chrono::system_clock::time_point t) {
    const std::time_t secs = std::chrono::system_clock::to_time_t(t);
    std::tm tm{};
    ::gmtime_r(&secs, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

std::optional<std::string> pid_or_null(uint32_t pid) {
    return pid == 0 ? std::nullopt : std::optional(std::to_string(pid));
}

// Database and role names are the client's bytes (listed from its StartupMessage on, before
// Postgres saw them): shown as UTF-8, which the console announces as client_encoding.
Row session_row(const SessionRecord& r, AdminClock clock) {
    return {std::to_string(r.id),
            std::string(to_string(r.transport)),
            r.client,
            valid_utf8(r.database),
            valid_utf8(r.role),
            r.active.load(std::memory_order_relaxed) ? "active" : "idle",
            std::to_string(r.bytes_from_client.load(std::memory_order_relaxed)),
            std::to_string(r.bytes_to_client.load(std::memory_order_relaxed)),
            iso_time(r.connected_at),
            seconds_since(r.connected.time_since_epoch().count(), clock.now),
            seconds_since(r.last_activity_ns.load(std::memory_order_relaxed), clock.now),
            pid_or_null(r.backend_pid.load(std::memory_order_relaxed))};
}

void show_sessions(const SessionDirectory& sessions, protocol::BackendWriter& out,
                   AdminClock clock) {
    out.row_description({"id", "transport", "client", "database", "role", "state",
                         "bytes_from_client", "bytes_to_client", "connected_at", "age_s", "idle_s",
                         "backend_pid"});
    const auto records = sessions.snapshot();
    for (const auto& record : records)
        out.data_row(session_row(*record, clock));
    out.command_complete(fmt::format("SHOW {}", records.size()));
}

// Per database and role: the sessions admitted now (all transports, pooled or not) and the
// server connections the workers keep idle for them.
void show_pools(AdminView view, protocol::BackendWriter& out) {
    std::map<PoolDirectory::Key, std::pair<uint64_t, uint64_t>> rows;  // sessions, idle
    for (const auto& record : view.sessions.snapshot())
        ++rows[{record->database, record->role}].first;
    for (const auto& [key, idle] : view.pools.snapshot())
        rows[key].second += idle;
    out.row_description({"database", "role", "sessions", "idle_server_connections"});
    for (const auto& [key, counts] : rows)
        out.data_row({valid_utf8(key.first), valid_utf8(key.second), std::to_string(counts.first),
                      std::to_string(counts.second)});
    out.command_complete(fmt::format("SHOW {}", rows.size()));
}

// PgBouncer's SHOW STATS has a row per database; l5pgd counts per transport (per database
// too with metrics.labels, on /metrics). A round trip is a request forwarded to Postgres
// until its first answer byte, as l5pgd sees it.
void show_stats(const Metrics& metrics, protocol::BackendWriter& out) {
    out.row_description({"transport", "sessions_total", "sessions_active", "session_errors",
                         "bytes_from_clients", "bytes_to_clients", "round_trips",
                         "avg_round_trip_us"});
    constexpr Transport kAll[] = {Transport::Unix, Transport::Shm, Transport::Tcp, Transport::Rdma};
    for (const Transport t : kAll) {
        const TransportStats s = metrics.stats(t);
        const double avg_us =
            s.round_trips == 0 ? 0.0 : static_cast<double>(s.round_trip_ns) / 1e3 / s.round_trips;
        out.data_row({std::string(to_string(t)), std::to_string(s.sessions_total),
                      std::to_string(s.sessions_active), std::to_string(s.session_errors),
                      std::to_string(s.bytes_from_clients), std::to_string(s.bytes_to_clients),
                      std::to_string(s.round_trips), fmt::format("{:.1f}", avg_us)});
    }
    out.command_complete(fmt::format("SHOW {}", std::size(kAll)));
}

// As PgBouncer's SHOW CONFIG: `changeable` says whether a reload (SIGHUP) applies the key.
void show_config(const config::Config& running, protocol::BackendWriter& out) {
    const std::vector<config::KeySetting> settings = config::settings_of(running);
    out.row_description({"key", "value", "default", "changeable"});
    for (const config::KeySetting& s : settings)
        out.data_row({std::string(s.key), s.value, s.default_value,
                      s.reload == config::Reload::Live ? "yes" : "no"});
    out.command_complete(fmt::format("SHOW {}", settings.size()));
}

void show_rows(std::string_view column, const std::vector<std::string>& rows,
               protocol::BackendWriter& out) {
    out.row_description({column});
    for (const std::string& row : rows)
        out.data_row({row});
    out.command_complete(fmt::format("SHOW {}", rows.size()));
}

}  // namespace

std::optional<uint64_t> answer_admin_query(std::string_view sql, AdminView view,
                                           protocol::BackendWriter& out, AdminClock clock) {
    const std::string command = normalize(sql);
    if (command.empty()) {
        out.empty_query_response();
    } else if (command == "show sessions" || command == "show clients") {
        show_sessions(view.sessions, out, clock);
    } else if (command == "show pools") {
        show_pools(view, out);
    } else if (command == "show stats") {
        show_stats(view.metrics, out);
    } else if (command == "show config") {
        show_config(view.config, out);
    } else if (command == "show version") {
        show_rows("version", {"l5pgd " L5PG_VERSION}, out);
    } else if (command == "show help") {
        show_rows("command",
                  {"SHOW SESSIONS", "SHOW CLIENTS", "SHOW POOLS", "SHOW STATS", "SHOW CONFIG",
                   "SHOW VERSION", "SHOW HELP", "RELOAD"},
                  out);
    } else if (command == "reload" && view.request_reload) {
        return view.request_reload();
    } else if (command == "reload") {
        out.error("ERROR", protocol::kSqlstateInsufficientPrivilege,
                  "l5pgd admin console: permission denied: RELOAD needs a role of admin.users");
    } else {
        out.error("ERROR", protocol::kSqlstateFeatureNotSupported,
                  fmt::format("l5pgd admin console: unknown command \"{}\" (SHOW HELP lists them)",
                              valid_utf8(sql, 200)));
    }
    out.ready_for_query();
    return std::nullopt;
}

void answer_reload(const ReloadLedger::Outcome& outcome, protocol::BackendWriter& out) {
    for (const std::string& warning : outcome.warnings)
        out.notice("WARNING", protocol::kSqlstateWarning,
                   fmt::format("l5pgd: reload: {}", valid_utf8(warning, 1000)));
    if (outcome.applied)
        out.command_complete("RELOAD");
    else
        out.error("ERROR", protocol::kSqlstateConfigFileError,
                  fmt::format("l5pgd admin console: RELOAD failed, the running configuration "
                              "stays: {}",
                              valid_utf8(outcome.error, 1000)));
    out.ready_for_query();
}

}  // namespace l5pg::daemon
