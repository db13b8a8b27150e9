#include "config/reload_keys.hpp"

#include <functional>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace l5pg::config {
namespace {

using Show = std::function<std::string(const Config&)>;

struct KeyRule {
    std::string_view key;
    Reload reload;
    Show show;
};

template <class T>
std::string text(const T& value) {
    return fmt::format("{}", value);
}

std::string quoted(const std::string& value) {
    return fmt::format("\"{}\"", value);
}

// Listeners, worker threads, the metrics endpoint and the RDMA device are set up once at
// start (sockets bound, threads pinned, memory registered): those keys need a restart.
// keep_restart_keys() copies exactly these sections back.
const std::vector<KeyRule>& rules() {
    constexpr Reload L = Reload::Live;
    constexpr Reload R = Reload::Restart;
    using C = const Config&;
    static const std::vector<KeyRule> table = {
        {"listen.unix_socket_dir", R, [](C c) { return quoted(c.listen.unix_socket_dir); }},
        {"listen.port", R, [](C c) { return text(c.listen.port); }},
        {"listen.tcp_address", R, [](C c) { return quoted(c.listen.tcp_address); }},
        {"listen.backlog", R, [](C c) { return text(c.listen.backlog); }},
        {"listen.unix_socket_mode", R,
         [](C c) { return fmt::format("{:04o}", c.listen.unix_socket_mode); }},
        {"upstream.unix_socket_dir", L, [](C c) { return quoted(c.upstream.unix_socket_dir); }},
        {"upstream.host", L, [](C c) { return quoted(c.upstream.host); }},
        {"upstream.port", L, [](C c) { return text(c.upstream.port); }},
        {"upstream.connect_timeout_ms", L, [](C c) { return text(c.upstream.connect_timeout_ms); }},
        {"upstream.dns_max_ttl_ms", L, [](C c) { return text(c.upstream.dns_max_ttl_ms); }},
        {"workers.count", R, [](C c) { return text(c.workers.count); }},
        {"workers.cpu_affinity", R,
         [](C c) { return fmt::format("[{}]", fmt::join(c.workers.cpu_affinity, ",")); }},
        {"shm.enabled", L, [](C c) { return text(c.shm.enabled); }},
        {"shm.max_ring_size", L, [](C c) { return text(c.shm.max_ring_size); }},
        {"shm.spin_us", L, [](C c) { return text(c.shm.spin_us); }},
        {"shm.yield_us", L, [](C c) { return text(c.shm.yield_us); }},
        {"shm.spin_awaiting_upstream", L, [](C c) { return text(c.shm.spin_awaiting_upstream); }},
        {"shm.block_when_crowded", L, [](C c) { return text(c.shm.block_when_crowded); }},
        {"shm.follow_client_cpu", L, [](C c) { return text(c.shm.follow_client_cpu); }},
        {"rdma.enabled", R, [](C c) { return text(c.rdma.enabled); }},
        {"rdma.device", R, [](C c) { return quoted(c.rdma.device); }},
        {"rdma.device_name", R, [](C c) { return quoted(c.rdma.device_name); }},
        {"rdma.device_port", R, [](C c) { return text(unsigned{c.rdma.device_port}); }},
        {"rdma.gid_index", R, [](C c) { return text(c.rdma.gid_index); }},
        {"rdma.max_ring_size", R, [](C c) { return text(c.rdma.max_ring_size); }},
        {"rdma.max_memory", R, [](C c) { return text(c.rdma.max_memory); }},
        {"rdma.completion_timeout_ms", R, [](C c) { return text(c.rdma.completion_timeout_ms); }},
        {"rdma.soft_port", R, [](C c) { return text(c.rdma.soft_port); }},
        {"metrics.listen", R, [](C c) { return quoted(c.metrics.listen); }},
        {"metrics.labels", R, [](C c) { return text(to_string(c.metrics.labels)); }},
        {"metrics.label_limit", R, [](C c) { return text(c.metrics.label_limit); }},
        {"limits.max_sessions", L, [](C c) { return text(c.limits.max_sessions); }},
        {"limits.startup_timeout_ms", L, [](C c) { return text(c.limits.startup_timeout_ms); }},
        {"limits.session_buffer_bytes", L, [](C c) { return text(c.limits.session_buffer_bytes); }},
        {"limits.drain_timeout_ms", L, [](C c) { return text(c.limits.drain_timeout_ms); }},
        {"limits.max_startup_sessions", L, [](C c) { return text(c.limits.max_startup_sessions); }},
        {"limits.max_startup_per_peer", L, [](C c) { return text(c.limits.max_startup_per_peer); }},
        {"limits.wrong_cancel_keys_per_second", L,
         [](C c) { return text(c.limits.wrong_cancel_keys_per_second); }},
        {"limits.wrong_cancel_keys_per_second_per_peer", L,
         [](C c) { return text(c.limits.wrong_cancel_keys_per_second_per_peer); }},
        {"pool.mode", L, [](C c) { return text(to_string(c.pool.mode)); }},
        {"pool.max_idle", L, [](C c) { return text(c.pool.max_idle); }},
        {"pool.idle_timeout_ms", L, [](C c) { return text(c.pool.idle_timeout_ms); }},
        {"pool.server_lifetime_ms", L, [](C c) { return text(c.pool.server_lifetime_ms); }},
        {"auth.local", L, [](C c) { return text(to_string(c.auth.local)); }},
        {"auth.tcp", L, [](C c) { return text(to_string(c.auth.tcp)); }},
        {"auth.ident_file", L, [](C c) { return quoted(c.auth.ident_file); }},
        {"auth.upstream_authenticates", L, [](C c) { return text(c.auth.upstream_authenticates); }},
        {"tls.mode", L, [](C c) { return text(to_string(c.tls.mode)); }},
        {"tls.cert_file", L, [](C c) { return quoted(c.tls.cert_file); }},
        {"tls.key_file", L, [](C c) { return quoted(c.tls.key_file); }},
        {"tls.ca_file", L, [](C c) { return quoted(c.tls.ca_file); }},
        {"logging.level", L, [](C c) { return c.logging.level; }},
        {"admin.database", L, [](C c) { return quoted(c.admin.database); }},
        {"admin.users", L, [](C c) { return fmt::format("[{}]", fmt::join(c.admin.users, ",")); }},
        {"admin.stats_users", L,
         [](C c) { return fmt::format("[{}]", fmt::join(c.admin.stats_users, ",")); }},
    };
    return table;
}

}  // namespace

std::vector<std::pair<std::string_view, Reload>> reload_keys() {
    std::vector<std::pair<std::string_view, Reload>> keys;
    for (const KeyRule& rule : rules())
        keys.emplace_back(rule.key, rule.reload);
    return keys;
}

std::vector<KeyChange> diff(const Config& running, const Config& loaded) {
    std::vector<KeyChange> changes;
    for (const KeyRule& rule : rules()) {
        std::string before = rule.show(running);
        std::string after = rule.show(loaded);
        if (before != after)
            changes.push_back({rule.key, std::move(before), std::move(after), rule.reload});
    }
    return changes;
}

std::vector<KeySetting> settings_of(const Config& running) {
    static const Config defaults;
    std::vector<KeySetting> settings;
    for (const KeyRule& rule : rules())
        settings.push_back({rule.key, rule.show(running), rule.show(defaults), rule.reload});
    return settings;
}

Config keep_restart_keys(const Config& running, Config loaded) {
    loaded.listen = running.listen;
    loaded.workers = running.workers;
    loaded.rdma = running.rdma;
    loaded.metrics = running.metrics;
    return loaded;
}

}  // namespace l5pg::config
