#include "config/config.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <string_view>

#include <sys/un.h>

#include "transport/ring_bounds.hpp"
#include "transport/wait/defaults.hpp"

namespace l5pg::config {

namespace {

constexpr std::string_view kSections[] = {"listen",  "metrics", "upstream", "workers",
                                          "shm",     "rdma",    "limits",   "pool",
                                          "logging", "auth",    "tls",      "admin"};
constexpr std::string_view kLogLevels[] = {"trace", "debug",    "info", "warn",
                                           "error", "critical", "off"};

[[noreturn]] void fail(const std::string& key, const std::string& reason) {
    throw ConfigError(key + ": " + reason);
}

// How a value is quoted in "(got ...)": scalars verbatim, collections by kind.
std::string describe(const YAML::Node& node) {
    switch (node.Type()) {
        case YAML::NodeType::Scalar:
            return "'" + node.Scalar() + "'";
        case YAML::NodeType::Sequence:
            return "a sequence";
        case YAML::NodeType::Map:
            return "a mapping";
        default:
            return "nothing";
    }
}

// Strict decimal integer: the whole scalar must be the number ("12abc" is rejected).
std::optional<int64_t> to_int(std::string_view text) {
    if (!text.empty() && text.front() == '+') {
        text.remove_prefix(1);
    }
    int64_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc{} || end != text.data() + text.size()) {
        return std::nullopt;
    }
    return value;
}

int64_t get_int(const YAML::Node& node, const std::string& key, int64_t lo, int64_t hi) {
    std::optional<int64_t> value;
    if (node.IsScalar()) {
        value = to_int(node.Scalar());
    }
    if (!value || *value < lo || *value > hi) {
        fail(key, "must be an integer between " + std::to_string(lo) + " and " +
                      std::to_string(hi) + " (got " + describe(node) + ")");
    }
    return *value;
}

template <class T>
T get_uint(const YAML::Node& node, const std::string& key, int64_t lo,
           int64_t hi = std::numeric_limits<T>::max()) {
    return static_cast<T>(get_int(node, key, lo, hi));
}

// A missing value (`key:` or an empty override) means the empty string.
std::string get_string(const YAML::Node& node, const std::string& key) {
    if (node.IsNull()) {
        return {};
    }
    if (!node.IsScalar()) {
        // [::1]:6439 unquoted is YAML's flow sequence; say so, it is not obvious.
        fail(key, "must be a string (got " + describe(node) + ")" +
                      (node.IsSequence() ? "; quote a value that begins with '[', e.g. "
                                           "\"[::1]:6439\""
                                         : ""));
    }
    return node.Scalar();
}

bool get_bool(const YAML::Node& node, const std::string& key) {
    bool value = false;
    if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) {
        fail(key, "must be true or false (got " + describe(node) + ")");
    }
    return value;
}

// "0770" and "0o770" are octal (the usual chmod spelling); plain integers are decimal, as in
// Postgres's unix_socket_permissions. At most 0777, as there: a socket has no use for the
// setuid, setgid and sticky bits, and an octal mode written without its 0 (770, decimal,
// is 01402) would lock out the socket's own user.
uint32_t get_mode(const YAML::Node& node, const std::string& key) {
    const std::string reason =
        "must be a file mode between 0000 and 0777 in octal with its leading 0, e.g. \"0770\" "
        "(got ";
    if (!node.IsScalar()) {
        fail(key, reason + describe(node) + ")");
    }
    std::string_view text = node.Scalar();
    int base = 10;
    if (text.starts_with("0o") || text.starts_with("0O")) {
        text.remove_prefix(2);
        base = 8;
    } else if (text.size() > 1 && text.front() == '0') {
        base = 8;
    }
    uint32_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
    if (text.empty() || ec != std::errc{} || end != text.data() + text.size()) {
        fail(key, reason + describe(node) + ")");
    }
    if (value > 0777) {
        fail(key, reason + describe(node) +
                      (base == 10 ? fmt::format(", decimal: 0{:o})", value) : std::string(")")));
    }
    return value;
}

std::vector<int> get_cpu_list(const YAML::Node& node, const std::string& key) {
    if (node.IsNull()) {
        return {};
    }
    if (!node.IsSequence()) {
        fail(key, "must be a list of CPU numbers, e.g. [0, 1] (got " + describe(node) + ")");
    }
    std::vector<int> cpus;
    for (size_t i = 0; i < node.size(); ++i) {
        const std::string item_key = key + "[" + std::to_string(i) + "]";
        cpus.push_back(static_cast<int>(get_int(node[i], item_key, 0, 1023)));  // CPU_SETSIZE
    }
    return cpus;
}

std::vector<std::string> get_name_list(const YAML::Node& node, const std::string& key) {
    if (node.IsNull())
        return {};
    if (!node.IsSequence())
        fail(key, "must be a list of names, e.g. [postgres, monitor] (got " + describe(node) + ")");
    std::vector<std::string> names;
    for (size_t i = 0; i < node.size(); ++i) {
        const std::string item_key = key + "[" + std::to_string(i) + "]";
        names.push_back(get_string(node[i], item_key));
        if (names.back().empty())
            fail(item_key, "must not be empty");
    }
    return names;
}

uint64_t get_ring_size(const YAML::Node& node, const std::string& key) {
    constexpr auto lo = static_cast<int64_t>(transport::kMinRingSize);
    constexpr auto hi = static_cast<int64_t>(transport::kMaxRingSize);
    std::optional<int64_t> value;
    if (node.IsScalar()) {
        value = to_int(node.Scalar());
    }
    if (!value || *value < lo || *value > hi || (*value & (*value - 1)) != 0) {
        fail(key, "must be a power of two between " + std::to_string(lo) + " and " +
                      std::to_string(hi) + " (got " + describe(node) + ")");
    }
    return static_cast<uint64_t>(*value);
}

std::string get_log_level(const YAML::Node& node, const std::string& key) {
    std::string level = get_string(node, key);
    for (std::string_view known : kLogLevels) {
        if (level == known) {
            return level;
        }
    }
    fail(key, "must be one of trace, debug, info, warn, error, critical, off (got " +
                  describe(node) + ")");
}

std::string get_rdma_device(const YAML::Node& node, const std::string& key) {
    std::string device = get_string(node, key);
    if (device != "auto" && device != "verbs" && device != "soft") {
        fail(key, "must be one of auto, verbs, soft (got " + describe(node) + ")");
    }
    return device;
}

std::string get_metrics_listen(const YAML::Node& node, const std::string& key) {
    std::string value = get_string(node, key);
    if (!value.empty()) {
        (void)parse_host_port(key, value);
    }
    return value;
}

AuthMethod get_auth_method(const YAML::Node& node, const std::string& key, bool local) {
    const std::string value = get_string(node, key);
    for (AuthMethod m :
         {AuthMethod::Peer, AuthMethod::Trust, AuthMethod::Passthrough, AuthMethod::Reject}) {
        if (value == to_string(m) && (local || m != AuthMethod::Peer)) {
            return m;
        }
    }
    fail(key, std::string("must be one of ") + (local ? "peer, " : "") +
                  "trust, passthrough, reject (got " + describe(node) + ")" +
                  (local ? "" : "; peer needs a Unix socket"));
}

TlsMode get_tls_mode(const YAML::Node& node, const std::string& key) {
    const std::string value = get_string(node, key);
    for (TlsMode m : {TlsMode::Disable, TlsMode::Allow, TlsMode::Require}) {
        if (value == to_string(m)) {
            return m;
        }
    }
    fail(key, "must be one of disable, allow, require (got " + describe(node) + ")");
}

MetricsLabels get_metrics_labels(const YAML::Node& node, const std::string& key) {
    const std::string value = get_string(node, key);
    for (MetricsLabels m :
         {MetricsLabels::None, MetricsLabels::Database, MetricsLabels::DatabaseUser})
        if (value == to_string(m))
            return m;
    fail(key, "must be one of none, database, database_user (got " + describe(node) + ")");
}

PoolMode get_pool_mode(const YAML::Node& node, const std::string& key) {
    const std::string value = get_string(node, key);
    for (PoolMode m : {PoolMode::None, PoolMode::Session})
        if (value == to_string(m))
            return m;
    fail(key, "must be one of none, session (got " + describe(node) + ")");
}

using Setter = std::function<void(Config&, const YAML::Node&, const std::string&)>;

// One entry per YAML key; the dotted key doubles as the override name.
const std::vector<std::pair<std::string_view, Setter>>& setters() {
    using N = const YAML::Node&;
    using K = const std::string&;
    static const std::vector<std::pair<std::string_view, Setter>> table = {
        {"listen.unix_socket_dir",
         [](Config& c, N n, K k) { c.listen.unix_socket_dir = get_string(n, k); }},
        {"listen.port", [](Config& c, N n, K k) { c.listen.port = get_uint<uint16_t>(n, k, 1); }},
        {"listen.tcp_address",
         [](Config& c, N n, K k) { c.listen.tcp_address = get_string(n, k); }},
        {"listen.backlog",
         [](Config& c, N n, K k) { c.listen.backlog = static_cast<int>(get_int(n, k, 1, 65535)); }},
        {"listen.unix_socket_mode",
         [](Config& c, N n, K k) { c.listen.unix_socket_mode = get_mode(n, k); }},
        {"upstream.unix_socket_dir",
         [](Config& c, N n, K k) { c.upstream.unix_socket_dir = get_string(n, k); }},
        {"upstream.host", [](Config& c, N n, K k) { c.upstream.host = get_string(n, k); }},
        {"upstream.port",
         [](Config& c, N n, K k) { c.upstream.port = get_uint<uint16_t>(n, k, 1); }},
        {"upstream.connect_timeout_ms",
         [](Config& c, N n, K k) { c.upstream.connect_timeout_ms = get_uint<uint32_t>(n, k, 1); }},
        {"upstream.dns_max_ttl_ms",
         [](Config& c, N n, K k) { c.upstream.dns_max_ttl_ms = get_uint<uint32_t>(n, k, 0); }},
        {"workers.count",
         [](Config& c, N n, K k) { c.workers.count = get_uint<unsigned>(n, k, 1, 256); }},
        {"workers.cpu_affinity",
         [](Config& c, N n, K k) { c.workers.cpu_affinity = get_cpu_list(n, k); }},
        {"shm.enabled", [](Config& c, N n, K k) { c.shm.enabled = get_bool(n, k); }},
        {"shm.max_ring_size",
         [](Config& c, N n, K k) { c.shm.max_ring_size = get_ring_size(n, k); }},
        {"shm.spin_us",
         [](Config& c, N n, K k) {
             c.shm.spin_us = get_uint<uint32_t>(n, k, 0, wait::kMaxBudgetUs);
         }},
        {"shm.yield_us",
         [](Config& c, N n, K k) {
             c.shm.yield_us = get_uint<uint32_t>(n, k, 0, wait::kMaxBudgetUs);
         }},
        {"shm.spin_awaiting_upstream",
         [](Config& c, N n, K k) { c.shm.spin_awaiting_upstream = get_bool(n, k); }},
        {"shm.block_when_crowded",
         [](Config& c, N n, K k) { c.shm.block_when_crowded = get_bool(n, k); }},
        {"shm.follow_client_cpu",
         [](Config& c, N n, K k) { c.shm.follow_client_cpu = get_bool(n, k); }},
        {"rdma.enabled", [](Config& c, N n, K k) { c.rdma.enabled = get_bool(n, k); }},
        {"rdma.device", [](Config& c, N n, K k) { c.rdma.device = get_rdma_device(n, k); }},
        {"rdma.device_name", [](Config& c, N n, K k) { c.rdma.device_name = get_string(n, k); }},
        {"rdma.device_port",
         [](Config& c, N n, K k) { c.rdma.device_port = get_uint<uint8_t>(n, k, 1, 255); }},
        {"rdma.gid_index",
         [](Config& c, N n, K k) { c.rdma.gid_index = static_cast<int>(get_int(n, k, -1, 255)); }},
        {"rdma.max_ring_size",
         [](Config& c, N n, K k) { c.rdma.max_ring_size = get_ring_size(n, k); }},
        {"rdma.max_memory",
         [](Config& c, N n, K k) {
             c.rdma.max_memory = get_uint<uint64_t>(n, k, 8192, int64_t{1} << 50);
         }},
        {"rdma.completion_timeout_ms",
         [](Config& c, N n, K k) {
             c.rdma.completion_timeout_ms = get_uint<uint32_t>(n, k, 1, 600000);
         }},
        {"rdma.soft_port",
         [](Config& c, N n, K k) { c.rdma.soft_port = get_uint<uint16_t>(n, k, 0); }},
        {"metrics.listen",
         [](Config& c, N n, K k) { c.metrics.listen = get_metrics_listen(n, k); }},
        {"metrics.labels",
         [](Config& c, N n, K k) { c.metrics.labels = get_metrics_labels(n, k); }},
        {"metrics.label_limit",
         [](Config& c, N n, K k) { c.metrics.label_limit = get_uint<unsigned>(n, k, 1, 100000); }},
        {"limits.max_sessions",
         [](Config& c, N n, K k) { c.limits.max_sessions = get_uint<unsigned>(n, k, 1); }},
        {"limits.startup_timeout_ms",
         [](Config& c, N n, K k) { c.limits.startup_timeout_ms = get_uint<uint32_t>(n, k, 1); }},
        {"limits.max_startup_sessions",
         [](Config& c, N n, K k) { c.limits.max_startup_sessions = get_uint<unsigned>(n, k, 1); }},
        {"limits.max_startup_per_peer",
         [](Config& c, N n, K k) { c.limits.max_startup_per_peer = get_uint<unsigned>(n, k, 1); }},
        {"limits.wrong_cancel_keys_per_second",
         [](Config& c, N n, K k) {
             c.limits.wrong_cancel_keys_per_second = get_uint<unsigned>(n, k, 1, 100000);
         }},
        {"limits.wrong_cancel_keys_per_second_per_peer",
         [](Config& c, N n, K k) {
             c.limits.wrong_cancel_keys_per_second_per_peer = get_uint<unsigned>(n, k, 1, 100000);
         }},
        {"limits.session_buffer_bytes",
         [](Config& c, N n, K k) {
             c.limits.session_buffer_bytes = get_uint<uint32_t>(n, k, 4096, 64 << 20);
         }},
        {"limits.drain_timeout_ms",
         [](Config& c, N n, K k) { c.limits.drain_timeout_ms = get_uint<uint32_t>(n, k, 1); }},
        {"pool.mode", [](Config& c, N n, K k) { c.pool.mode = get_pool_mode(n, k); }},
        {"pool.max_idle",
         [](Config& c, N n, K k) { c.pool.max_idle = get_uint<unsigned>(n, k, 0); }},
        {"pool.idle_timeout_ms",
         [](Config& c, N n, K k) { c.pool.idle_timeout_ms = get_uint<uint32_t>(n, k, 1); }},
        {"pool.server_lifetime_ms",
         [](Config& c, N n, K k) { c.pool.server_lifetime_ms = get_uint<uint32_t>(n, k, 1); }},
        {"logging.level", [](Config& c, N n, K k) { c.logging.level = get_log_level(n, k); }},
        {"auth.local", [](Config& c, N n, K k) { c.auth.local = get_auth_method(n, k, true); }},
        {"auth.tcp", [](Config& c, N n, K k) { c.auth.tcp = get_auth_method(n, k, false); }},
        {"auth.ident_file", [](Config& c, N n, K k) { c.auth.ident_file = get_string(n, k); }},
        {"tls.mode", [](Config& c, N n, K k) { c.tls.mode = get_tls_mode(n, k); }},
        {"tls.cert_file", [](Config& c, N n, K k) { c.tls.cert_file = get_string(n, k); }},
        {"tls.key_file", [](Config& c, N n, K k) { c.tls.key_file = get_string(n, k); }},
        {"tls.ca_file", [](Config& c, N n, K k) { c.tls.ca_file = get_string(n, k); }},
        {"auth.upstream_authenticates",
         [](Config& c, N n, K k) { c.auth.upstream_authenticates = get_bool(n, k); }},
        {"admin.database", [](Config& c, N n, K k) { c.admin.database = get_string(n, k); }},
        {"admin.users", [](Config& c, N n, K k) { c.admin.users = get_name_list(n, k); }},
        {"admin.stats_users",
         [](Config& c, N n, K k) { c.admin.stats_users = get_name_list(n, k); }},
    };
    return table;
}

bool known_section(std::string_view section) {
    for (std::string_view s : kSections) {
        if (s == section) {
            return true;
        }
    }
    return false;
}

std::string known_keys(std::string_view section) {
    std::string out;
    for (const auto& [key, setter] : setters()) {
        if (key.substr(0, key.find('.')) == section) {
            out += (out.empty() ? "" : ", ") + std::string(key.substr(key.find('.') + 1));
        }
    }
    return out;
}

std::string known_sections() {
    std::string out;
    for (std::string_view s : kSections) {
        out += (out.empty() ? "" : ", ") + std::string(s);
    }
    return out;
}

// Applies one "section.key" value; `where` ("line 3", "override 'x=y'") is appended to
// any error so the user can find the offending spot.
void apply(Config& config, const std::string& key, const YAML::Node& value,
           const std::string& where) {
    for (const auto& [name, setter] : setters()) {
        if (name == key) {
            try {
                setter(config, value, key);
            } catch (const ConfigError& e) {
                throw ConfigError(std::string(e.what()) + " (" + where + ")");
            }
            return;
        }
    }
    const std::string section = key.substr(0, key.find('.'));
    if (!known_section(section)) {
        fail(key, "unknown section '" + section + "' (expected one of " + known_sections() + ") (" +
                      where + ")");
    }
    fail(key, "unknown key (" + section + " accepts " + known_keys(section) + ") (" + where + ")");
}

std::string line_of(const YAML::Node& node) {
    const YAML::Mark mark = node.Mark();
    return mark.is_null() ? std::string("in file") : "line " + std::to_string(mark.line + 1);
}

std::string key_text(const YAML::Node& key, const std::string& parent) {
    if (!key.IsScalar()) {
        fail(parent, "keys must be plain strings (" + line_of(key) + ")");
    }
    return key.Scalar();
}

void apply_section(Config& config, const std::string& section, const YAML::Node& body,
                   const std::string& where) {
    if (!known_section(section)) {
        fail(section, "unknown section (expected one of " + known_sections() + ") (" + where + ")");
    }
    if (body.IsNull()) {
        return;  // "listen:" with nothing under it keeps the defaults
    }
    if (!body.IsMap()) {
        fail(section, "must be a mapping of keys (got " + describe(body) + ")");
    }
    std::set<std::string> seen;
    for (const auto& entry : body) {
        const std::string key = section + "." + key_text(entry.first, section);
        if (!seen.insert(key).second) {
            fail(key, "duplicate key (" + line_of(entry.first) + ")");
        }
        apply(config, key, entry.second, line_of(entry.first));
    }
}

void apply_document(Config& config, const YAML::Node& root) {
    if (root.IsNull()) {
        return;  // empty file: defaults
    }
    if (!root.IsMap()) {
        throw ConfigError("configuration: top level must be a mapping of sections (got " +
                          describe(root) + ")");
    }
    std::set<std::string> seen;
    for (const auto& entry : root) {
        const std::string section = key_text(entry.first, "configuration");
        if (!seen.insert(section).second) {
            fail(section, "duplicate section (" + line_of(entry.first) + ")");
        }
        apply_section(config, section, entry.second, line_of(entry.first));
    }
}

// One document: YAML::Load would stop at a second `---` and silently drop the rest (a file
// made of snippets that each begin with `---` would lose, say, its tls section).
YAML::Node parse_yaml(const std::string& text, const std::string& origin) {
    std::vector<YAML::Node> documents;
    try {
        documents = YAML::LoadAll(text);
    } catch (const YAML::ParserException& e) {
        throw ConfigError(origin + ": YAML syntax error at line " +
                          std::to_string(e.mark.line + 1) + ", column " +
                          std::to_string(e.mark.column + 1) + ": " + e.msg);
    }
    if (documents.size() > 1) {
        throw ConfigError(origin + ": " + std::to_string(documents.size()) +
                          " YAML documents (separated by '---'); l5pgd reads one: merge them "
                          "into one mapping of sections");
    }
    return documents.empty() ? YAML::Node() : documents.front();
}

void apply_override(Config& config, const std::string& item) {
    const auto eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const auto dot = key.find('.');
    if (eq == std::string::npos || dot == std::string::npos || dot == 0 || dot + 1 == key.size()) {
        throw ConfigError("override '" + item + "': expected section.key=value");
    }
    const std::string where = "override '" + item + "'";
    YAML::Node value;
    try {
        value = YAML::Load(item.substr(eq + 1));
    } catch (const YAML::ParserException& e) {
        fail(key, "invalid YAML value: " + e.msg + " (" + where + ")");
    }
    apply(config, key, value, where);
}

// A socket directory whose "<dir>/.s.PGSQL.<port>" does not fit sockaddr_un's sun_path
// would pass a reload and then fail every connect (or bind) with ENAMETOOLONG.
void check_socket_path_fits(const std::string& key, const std::string& dir, uint16_t port) {
    if (dir.empty()) {
        return;
    }
    const std::string path = socket_path(dir, port);
    if (path.size() >= sizeof(sockaddr_un::sun_path)) {
        fail(key, "too long: the socket path \"" + path + "\" has " + std::to_string(path.size()) +
                      " bytes, a Unix socket's at most " +
                      std::to_string(sizeof(sockaddr_un::sun_path) - 1));
    }
}

// Rules spanning several keys; single-key ranges are checked while parsing.
void validate(const Config& config) {
    if (config.listen.unix_socket_dir.empty() && config.listen.tcp_address.empty()) {
        fail("listen.tcp_address",
             "may not be empty when listen.unix_socket_dir is empty too (no listener left)");
    }
    if (config.rdma.max_memory < 2 * config.rdma.max_ring_size) {
        fail("rdma.max_memory",
             "must hold one session with the largest rings (2 x rdma.max_ring_size = " +
                 std::to_string(2 * config.rdma.max_ring_size) + ")");
    }
    if (config.rdma.enabled && config.listen.tcp_address.empty()) {
        fail("rdma.enabled",
             "needs the TCP listener (listen.tcp_address is empty): RDMA clients upgrade a TCP "
             "connection");
    }
    for (const auto& [key, method] :
         {std::pair{"auth.local", config.auth.local}, std::pair{"auth.tcp", config.auth.tcp}}) {
        if (method == AuthMethod::Passthrough && !config.auth.upstream_authenticates) {
            fail(key,
                 "passthrough lets PostgreSQL authenticate clients, but PostgreSQL sees every "
                 "client as l5pgd's own OS user, so a peer or trust rule in pg_hba.conf for that "
                 "user would admit anyone as any role. Make pg_hba.conf require a password "
                 "(scram-sha-256) for l5pgd's connections (e.g. upstream.host=127.0.0.1 with "
                 "Debian's default rules), then set auth.upstream_authenticates=true");
        }
    }
    if (config.tls.mode != TlsMode::Disable &&
        (config.tls.cert_file.empty() || config.tls.key_file.empty())) {
        fail("tls.mode",
             std::string(to_string(config.tls.mode)) + " needs tls.cert_file and tls.key_file");
    }
    if (config.upstream.host.empty() && config.upstream.unix_socket_dir.empty()) {
        fail("upstream.unix_socket_dir",
             "may not be empty when upstream.host is empty (no way to reach PostgreSQL)");
    }
    check_socket_path_fits("listen.unix_socket_dir", config.listen.unix_socket_dir,
                           config.listen.port);
    if (config.upstream.host.empty()) {
        check_socket_path_fits("upstream.unix_socket_dir", config.upstream.unix_socket_dir,
                               config.upstream.port);
    }
}

Config build(const YAML::Node& root, const std::vector<std::string>& overrides) {
    Config config;
    apply_document(config, root);
    for (const auto& item : overrides) {
        apply_override(config, item);
    }
    validate(config);
    return config;
}

std::string read_file(const std::string& path) {
    std::FILE* file = std::fopen(path.c_str(), "rb");
    if (file == nullptr) {
        throw ConfigError(path + ": cannot open: " + std::strerror(errno));
    }
    std::string text;
    char buf[4096];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, file)) > 0) {
        text.append(buf, n);
    }
    const int err = std::ferror(file) ? errno : 0;
    std::fclose(file);
    if (err != 0) {
        throw ConfigError(path + ": cannot read: " + std::strerror(err));
    }
    return text;
}

bool all_digits(std::string_view s) {
    if (s.empty()) {
        return false;
    }
    for (char ch : s) {
        if (ch < '0' || ch > '9') {
            return false;
        }
    }
    return true;
}

}  // namespace

std::string socket_path(const std::string& dir, uint16_t port) {
    return fmt::format("{}/.s.PGSQL.{}", dir, port);
}

std::string_view to_string(AuthMethod m) noexcept {
    switch (m) {
        case AuthMethod::Peer:
            return "peer";
        case AuthMethod::Trust:
            return "trust";
        case AuthMethod::Passthrough:
            return "passthrough";
        case AuthMethod::Reject:
            return "reject";
    }
    return "?";
}

std::string_view to_string(MetricsLabels m) noexcept {
    switch (m) {
        case MetricsLabels::None:
            return "none";
        case MetricsLabels::Database:
            return "database";
        case MetricsLabels::DatabaseUser:
            return "database_user";
    }
    return "?";
}

std::string_view to_string(PoolMode m) noexcept {
    switch (m) {
        case PoolMode::None:
            return "none";
        case PoolMode::Session:
            return "session";
    }
    return "?";
}

std::string_view to_string(TlsMode m) noexcept {
    switch (m) {
        case TlsMode::Disable:
            return "disable";
        case TlsMode::Allow:
            return "allow";
        case TlsMode::Require:
            return "require";
    }
    return "?";
}

Config load(const std::string& path, const std::vector<std::string>& overrides,
            EmptyFile empty_file) {
    if (path.empty()) {
        return build(YAML::Node(), overrides);
    }
    const YAML::Node root = parse_yaml(read_file(path), path);
    if (root.IsNull() && empty_file == EmptyFile::Refuse) {
        throw ConfigError(path +
                          ": no settings (empty, or only comments); it would reset every key to "
                          "its default");
    }
    return build(root, overrides);
}

Config load_from_string(const std::string& yaml, const std::vector<std::string>& overrides) {
    return build(parse_yaml(yaml, "<string>"), overrides);
}

std::pair<std::string, uint16_t> parse_host_port(const std::string& key, const std::string& value) {
    const std::string usage = " (got '" + value + "')";
    std::string host;
    std::string port;
    if (!value.empty() && value.front() == '[') {
        const auto close = value.find(']');
        if (close == std::string::npos || close + 1 >= value.size() || value[close + 1] != ':') {
            fail(key, "must be [ipv6]:port" + usage);
        }
        host = value.substr(1, close - 1);
        port = value.substr(close + 2);
    } else {
        const auto colon = value.rfind(':');
        if (colon == std::string::npos) {
            fail(key, "must be host:port" + usage);
        }
        host = value.substr(0, colon);
        port = value.substr(colon + 1);
        if (host.find(':') != std::string::npos) {
            fail(key, "IPv6 addresses must be bracketed, e.g. [::1]:6439" + usage);
        }
    }
    if (host.empty()) {
        fail(key, "host is empty; use host:port" + usage);
    }
    // Port 0 is accepted: the OS picks an ephemeral port.
    if (!all_digits(port) || port.size() > 5 || std::stoul(port) > 65535) {
        fail(key, "port must be an integer between 0 and 65535" + usage);
    }
    return {host, static_cast<uint16_t>(std::stoul(port))};
}

std::vector<std::string> settings_without_effect(const Config& config) {
    std::vector<std::string> out;
    const bool tcp = !config.listen.tcp_address.empty();
    if (!tcp && config.tls.mode != TlsMode::Disable)
        out.emplace_back("tls.mode: no effect, listen.tcp_address is empty (no TCP listener)");
    if (!config.tls.ca_file.empty() && config.tls.mode == TlsMode::Disable)
        out.emplace_back("tls.ca_file: no effect, tls.mode is disable");
    if (tcp && !config.tls.ca_file.empty() && config.tls.mode == TlsMode::Allow)
        out.emplace_back(
            "tls.ca_file: checks TLS clients only; under tls.mode allow plaintext TCP clients "
            "present no certificate (tls.mode require makes every TCP client present one)");
    if (!tcp && config.auth.tcp != AuthMethod::Reject)
        out.emplace_back("auth.tcp: no effect, listen.tcp_address is empty (no TCP listener)");
    if (config.rdma.soft_port != 0 && (!config.rdma.enabled || config.rdma.device != "soft"))
        out.emplace_back(
            "rdma.soft_port: no effect, the soft device is not used "
            "(rdma.enabled: true and rdma.device: soft use it)");
    if (!config.auth.ident_file.empty() && config.auth.local != AuthMethod::Peer)
        out.emplace_back("auth.ident_file: no effect, auth.local is not peer");
    const auto identifies = AuthConfig::l5pgd_identifies;
    const bool local = !config.listen.unix_socket_dir.empty();
    if (config.pool.mode == PoolMode::Session && !(local && identifies(config.auth.local)) &&
        !(tcp && identifies(config.auth.tcp)))
        out.emplace_back(
            "pool.mode: session has no effect, no client is pooled unless l5pgd identifies it "
            "(auth.local peer or trust, auth.tcp trust, on a listener that exists; passthrough "
            "never pools)");
    if (tcp && config.rdma.enabled && config.auth.tcp == AuthMethod::Reject)
        out.emplace_back(
            "rdma.enabled: no effect, auth.tcp is reject (every RDMA upgrade is "
            "declined)");
    return out;
}

}  // namespace l5pg::config
