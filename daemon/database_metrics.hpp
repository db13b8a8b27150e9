// Per-database session metrics (metrics.labels), beside Metrics' per-transport ones:
//   l5pg_database_sessions_total{database[,user]}             counter
//   l5pg_database_sessions_active{database[,user]}            gauge
//   l5pg_database_bytes_total{database[,user],direction}      counter
//   l5pg_database_session_errors_total{database[,user]}       counter
//   l5pg_database_sessions_unlabeled_total                    counter
//
// A session is counted under its names once Postgres accepted its login, so only databases
// and roles that exist make series, never what a client merely asked for (names are cut to
// 63 bytes, as Postgres cuts them). Series are kept for metrics.label_limit label sets;
// sessions beyond it are counted as unlabeled only. Workers bump relaxed atomics through the
// pointer their session got at login; the lock is taken once per login, and by rendering
// just long enough to copy the list (series are never removed, so the pointers stay good).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "config/config.hpp"

namespace l5pg::daemon {

enum class Direction;

// One label set's counters; lives as long as the DatabaseMetrics that made it.
struct DatabaseCounters {
    std::atomic<uint64_t> sessions{0};
    std::atomic<int64_t> active{0};
    std::atomic<uint64_t> bytes_client_to_server{0};
    std::atomic<uint64_t> bytes_server_to_client{0};
    std::atomic<uint64_t> errors{0};

    void opened() noexcept;
    void closed(bool error) noexcept;
    void add_bytes(Direction d, uint64_t n) noexcept;
};

class DatabaseMetrics {
  public:
    // Before any session: which labels, and for how many label sets.
    void configure(config::MetricsLabels labels, unsigned limit);
    [[nodiscard]] bool enabled() const noexcept { return labels_ != config::MetricsLabels::None; }

    // The counters of `database` (and `user`, under database_user), made at its first
    // session. nullptr when labels are off, or when the limit is reached (the session is
    // then counted as unlabeled).
    [[nodiscard]] DatabaseCounters* counters_for(std::string_view database, std::string_view user);

    // Appends the series (nothing when labels are off).
    void render(std::string& out) const;

  private:
    config::MetricsLabels labels_ = config::MetricsLabels::None;
    size_t limit_ = 0;
    mutable std::mutex mutex_;
    std::map<std::pair<std::string, std::string>, std::unique_ptr<DatabaseCounters>> series_;
    std::atomic<uint64_t> unlabeled_{0};
};

}  // namespace l5pg::daemon
