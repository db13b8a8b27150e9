#include "daemon/database_metrics.hpp"

#include <fmt/format.h>

#include <iterator>
#include <vector>

#include "daemon/metrics.hpp"
#include "daemon/prometheus_text.hpp"
#include "protocol/startup.hpp"

namespace l5pg::daemon {

void DatabaseCounters::opened() noexcept {
    sessions.fetch_add(1, std::memory_order_relaxed);
    active.fetch_add(1, std::memory_order_relaxed);
}

void DatabaseCounters::closed(bool error) noexcept {
    active.fetch_sub(1, std::memory_order_relaxed);
    if (error)
        errors.fetch_add(1, std::memory_order_relaxed);
}

void DatabaseCounters::add_bytes(Direction d, uint64_t n) noexcept {
    (d == Direction::ClientToServer ? bytes_client_to_server : bytes_server_to_client)
        .fetch_add(n, std::memory_order_relaxed);
}

void DatabaseMetrics::configure(config::MetricsLabels labels, unsigned limit) {
    labels_ = labels;
    limit_ = limit;
}

namespace {

// A series per name as the label shows it: Postgres cuts names to NAMEDATALEN - 1 bytes, and
// names that are not UTF-8 (a SQL_ASCII or LATIN1 server) show U+FFFD for what is not, so
// two such names may show alike and are counted as one (two series with one label set
// would make the scrape invalid).
std::string name_label(std::string_view name) {
    return valid_utf8(protocol::postgres_name(name));
}

template <class T>
T read(const std::atomic<T>& v) noexcept {
    return v.load(std::memory_order_relaxed);
}

}  // namespace

DatabaseCounters* DatabaseMetrics::counters_for(std::string_view database, std::string_view user) {
    if (!enabled())
        return nullptr;
    std::pair<std::string, std::string> key{
        name_label(database),
        labels_ == config::MetricsLabels::DatabaseUser ? name_label(user) : std::string()};
    const std::lock_guard lock(mutex_);
    if (const auto it = series_.find(key); it != series_.end())
        return it->second.get();
    if (series_.size() >= limit_) {
        unlabeled_.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
    }
    return series_.emplace(std::move(key), std::make_unique<DatabaseCounters>())
        .first->second.get();
}

void DatabaseMetrics::render(std::string& out) const {
    if (!enabled())
        return;
    const bool with_user = labels_ == config::MetricsLabels::DatabaseUser;
    std::vector<std::pair<const std::pair<std::string, std::string>*, const DatabaseCounters*>>
        listed;
    {
        const std::lock_guard lock(mutex_);
        listed.reserve(series_.size());
        for (const auto& [names, counters] : series_)
            listed.emplace_back(&names, counters.get());
    }
    // The label set of each series, rendered once: database="...",user="..."
    std::vector<std::pair<std::string, const DatabaseCounters*>> sets;
    sets.reserve(listed.size());
    for (const auto& [names_ptr, counters] : listed) {
        const auto& names = *names_ptr;
        std::string labels = fmt::format("database=\"{}\"", prometheus::label_value(names.first));
        if (with_user)
            labels += fmt::format(",user=\"{}\"", prometheus::label_value(names.second));
        sets.emplace_back(std::move(labels), counters);
    }
    auto samples = [&](std::string_view name, std::string_view type, std::string_view help,
                       auto value) {
        prometheus::header(out, name, type, help);
        for (const auto& [labels, counters] : sets)
            fmt::format_to(std::back_inserter(out), "{}{{{}}} {}\n", name, labels,
                           value(*counters));
    };
    samples("l5pg_database_sessions_total", "counter",
            "Client sessions whose login Postgres accepted, by database.",
            [](const DatabaseCounters& c) { return read(c.sessions); });
    samples("l5pg_database_sessions_active", "gauge", "Logged-in client sessions open now.",
            [](const DatabaseCounters& c) { return read(c.active); });
    prometheus::header(out, "l5pg_database_bytes_total", "counter",
                       "Bytes forwarded for logged-in sessions, by database.");
    for (const auto& [labels, counters] : sets)
        fmt::format_to(
            std::back_inserter(out),
            "l5pg_database_bytes_total{{{},direction=\"{}\"}} {}\n"
            "l5pg_database_bytes_total{{{},direction=\"{}\"}} {}\n",
            labels, to_string(Direction::ClientToServer), read(counters->bytes_client_to_server),
            labels, to_string(Direction::ServerToClient), read(counters->bytes_server_to_client));
    samples("l5pg_database_session_errors_total", "counter",
            "Logged-in sessions closed by an error, by database.",
            [](const DatabaseCounters& c) { return read(c.errors); });
    prometheus::header(out, "l5pg_database_sessions_unlabeled_total", "counter",
                       "Logged-in sessions not counted by database: metrics.label_limit reached.");
    fmt::format_to(std::back_inserter(out), "l5pg_database_sessions_unlabeled_total {}\n",
                   read(unlabeled_));
}

}  // namespace l5pg::daemon
