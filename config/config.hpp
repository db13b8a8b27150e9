// l5pgd configuration: one YAML file plus `-o key=value` overrides, validated at start.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "transport/wait/defaults.hpp"

namespace l5pg::config {

// Thrown for any invalid configuration. what() names the key and the reason, e.g.
// "listen.port: must be an integer between 1 and 65535 (got '70000')".
class ConfigError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

struct ListenConfig {
    std::string unix_socket_dir = "/var/run/l5pg";  // "" disables the Unix listener
    uint16_t port = 6432;                           // .s.PGSQL.<port> and TCP port
    std::string tcp_address = "127.0.0.1";          // "" disables the TCP listener
    int backlog = 4096;                             // the kernel caps it at net.core.somaxconn
    uint32_t unix_socket_mode = 0777;               // octal in YAML ("0770")
};

struct UpstreamConfig {
    std::string unix_socket_dir = "/var/run/postgresql";  // used when host is ""
    std::string host;                                     // TCP host, optional
    uint16_t port = 5432;
    uint32_t connect_timeout_ms = 5000;  // the lookup, then each address in turn
    uint32_t dns_max_ttl_ms = 15000;     // how long a looked-up host's addresses are used
};

struct WorkersConfig {
    unsigned count = 2;
    std::vector<int> cpu_affinity;  // empty: no pinning; else worker i -> cpus[i % n]
};

struct ShmConfig {
    bool enabled = true;
    uint64_t max_ring_size = uint64_t{16} << 20;  // largest ring a client may ask for
    uint32_t spin_us = wait::kDefaultSpinUs;      // worker busy-poll budget when idle
    uint32_t yield_us = wait::kDefaultYieldUs;    // then sched_yield budget, then block
    // Keep spinning while every busy session waits for Postgres's answer (instead of
    // blocking in epoll until the upstream socket is readable). See worker.cpp.
    bool spin_awaiting_upstream = false;
    // A worker not confined to one CPU stops spinning for its lone session while the CPUs
    // are crowded (transport/wait/crowding_gauge.hpp). See worker.cpp.
    bool block_when_crowded = true;
    // While block_when_crowded has it blocking, such a worker runs on its client's CPU
    // (transport/wait/cpu_follower.hpp). See worker.cpp.
    bool follow_client_cpu = true;
};

// L5 RDMA channel for remote clients (docs/wire-format.md section 5): clients upgrade their
// TCP connection to l5pgd with the L5 upgrade request, transport 2.
struct RdmaConfig {
    bool enabled = false;         // accept RDMA upgrades on the TCP listener
    std::string device = "auto";  // auto (verbs, never soft), verbs, soft
    // verbs only
    std::string device_name;  // "" = the first RDMA device
    uint8_t device_port = 1;  // 1-based port of the device
    int gid_index = -1;       // -1: LID routing (InfiniBand); RoCE needs a GID index
    // Largest ring (per direction) a client may ask for; each RDMA session costs l5pgd
    // its client->server ring plus a staging copy of the client's server->client ring.
    uint64_t max_ring_size = uint64_t{16} << 20;
    // The rings of all RDMA sessions together, in bytes (a client asks for them before it
    // authenticates; pinned memory with verbs): upgrades beyond are declined.
    uint64_t max_memory = uint64_t{1} << 30;
    // A signaled RDMA request without completion for this long fails the session.
    uint32_t completion_timeout_ms = 10000;
    // soft device only: TCP port (on listen.tcp_address) for the soft device's wire
    // connections; 0 = a free port picked at start (announced to clients in the upgrade).
    uint16_t soft_port = 0;
};

// Which names label the per-database session metrics (daemon/database_metrics.hpp).
enum class MetricsLabels {
    None,          // no per-database series
    Database,      // database="..."
    DatabaseUser,  // database="...", user="..."
};
[[nodiscard]] std::string_view to_string(MetricsLabels m) noexcept;

struct MetricsConfig {
    std::string listen = "127.0.0.1:6439";  // host:port; "" disables
    MetricsLabels labels = MetricsLabels::None;
    unsigned label_limit = 100;  // distinct label sets; sessions beyond go unlabeled
};

struct LimitsConfig {
    unsigned max_sessions = 1000;
    uint32_t startup_timeout_ms = 10000;  // client must finish its startup packet by then
    // Connections that have not yet sent a complete StartupMessage: in all, and from one
    // peer (a Unix-socket uid or a TCP address). Further connections are refused at once,
    // so idle sockets cannot keep other clients out.
    unsigned max_startup_sessions = 500;
    unsigned max_startup_per_peer = 100;
    // CancelRequests with a key no session holds that l5pgd looks up a second, in all and
    // from one peer; beyond, every CancelRequest is dropped unread (cancel_guess_limiter.hpp).
    unsigned wrong_cancel_keys_per_second = 100;
    unsigned wrong_cancel_keys_per_second_per_peer = 10;
    // Per direction and session: reading from one side stops while this much waits for
    // the other (socket and RDMA clients); it also bounds the queues' memory (byte_queue.hpp).
    uint32_t session_buffer_bytes = 256 * 1024;
    // After a client left: how long its session may take to hand what it published to
    // Postgres and see Postgres close (daemon/session_depart.cpp).
    uint32_t drain_timeout_ms = 10000;
};

// Who may ask for which database role (README "Security model"). Postgres sees every
// upstream connection as coming from l5pgd's own OS user, so its peer/trust rules for
// that user would apply to every client: l5pgd must check the client first.
enum class AuthMethod {
    Peer,         // Unix/SHM: the role is the client's OS user name, or the ident map allows it
    Trust,        // anyone may ask for any role (as if Postgres trusted them directly)
    Passthrough,  // Postgres authenticates (password/SCRAM), l5pgd checks nothing
    Reject,       // no client is served on these transports
};
[[nodiscard]] std::string_view to_string(AuthMethod m) noexcept;

struct AuthConfig {
    AuthMethod local = AuthMethod::Peer;  // Unix-socket and shared-memory clients
    AuthMethod tcp = AuthMethod::Reject;  // TCP and RDMA clients (peer is not allowed)
    std::string ident_file;               // "OS-user role" lines; "" = none
    // The operator's statement that pg_hba.conf makes Postgres authenticate l5pgd's
    // upstream connections (md5/scram-sha-256, no peer/trust): required by passthrough.
    bool upstream_authenticates = false;

    // Whether l5pgd itself establishes who a client under `m` is (passthrough leaves it to
    // Postgres; reject serves nobody): what pooling needs.
    [[nodiscard]] static constexpr bool l5pgd_identifies(AuthMethod m) noexcept {
        return m == AuthMethod::Peer || m == AuthMethod::Trust;
    }
    // The rule for a client: auth.local for Unix-socket and SHM, auth.tcp for TCP and RDMA.
    [[nodiscard]] AuthMethod method_for(bool local_client) const noexcept {
        return local_client ? local : tcp;
    }
};

enum class PoolMode {
    None,     // one new server connection per client session, closed when it ends
    Session,  // a clean client's server connection is reset and kept for the next client
};
[[nodiscard]] std::string_view to_string(PoolMode m) noexcept;

// Server-connection pooling (daemon/upstream_pool.hpp); never for auth passthrough.
struct PoolConfig {
    PoolMode mode = PoolMode::None;
    unsigned max_idle = 20;                     // idle server connections, all workers together
    uint32_t idle_timeout_ms = 600 * 1000;      // an idle server connection is closed after this
    uint32_t server_lifetime_ms = 3600 * 1000;  // ... and one whose backend is this old
};

struct LoggingConfig {
    std::string level = "info";  // trace, debug, info, warn, error, critical, off
};

// TLS for clients on the TCP listener (like PgBouncer's client_tls_*).
enum class TlsMode {
    Disable,  // SSLRequest answered 'N'
    Allow,    // SSLRequest answered 'S'; plaintext clients served too
    Require,  // TCP clients must use TLS; an RDMA upgrade only inside TLS
};
[[nodiscard]] std::string_view to_string(TlsMode m) noexcept;

struct TlsConfig {
    TlsMode mode = TlsMode::Disable;
    std::string cert_file;  // PEM certificate chain; required unless mode is disable
    std::string key_file;   // PEM private key
    std::string ca_file;    // "": no client certificates; else clients must present one
};

// The admin console (daemon/admin_console.hpp): a virtual database answered by l5pgd.
struct AdminConfig {
    std::string database = "l5pgd";              // "" = no console
    std::vector<std::string> users{"postgres"};  // roles that may use it, RELOAD included
    std::vector<std::string> stats_users;        // roles that may only read (SHOW ...)
};

struct Config {
    ListenConfig listen;
    UpstreamConfig upstream;
    WorkersConfig workers;
    ShmConfig shm;
    RdmaConfig rdma;
    MetricsConfig metrics;
    LimitsConfig limits;
    PoolConfig pool;
    LoggingConfig logging;
    AuthConfig auth;
    TlsConfig tls;
    AdminConfig admin;
};

// What a file without a setting (empty, or only comments) means.
enum class EmptyFile {
    Defaults,  // at start: every key at its default
    Refuse,    // at a reload (-o overrides or not): more likely a file caught mid-write
               // than a wish to reset all
};

// Loads `path` (empty: defaults only), applies `overrides` ("listen.port=6433", dotted
// keys as in the YAML), validates. Unknown keys are errors (typos must not pass).
[[nodiscard]] Config load(const std::string& path, const std::vector<std::string>& overrides,
                          EmptyFile empty_file = EmptyFile::Defaults);

// Same, from YAML text (for tests).
[[nodiscard]] Config load_from_string(const std::string& yaml,
                                      const std::vector<std::string>& overrides);

// Settings that are valid but take no effect as the rest is configured (tls.* without a TCP
// listener, say): one line each, naming the key, for l5pgd to warn about at start, at a
// reload and in --check. Not errors: a file shared by several hosts may hold them.
[[nodiscard]] std::vector<std::string> settings_without_effect(const Config& config);

// "<dir>/.s.PGSQL.<port>": where PostgreSQL (and l5pgd, like it) puts a Unix socket.
[[nodiscard]] std::string socket_path(const std::string& dir, uint16_t port);

// Splits "host:port" / "[v6]:port". Throws ConfigError naming `key`.
[[nodiscard]] std::pair<std::string, uint16_t> parse_host_port(const std::string& key,
                                                               const std::string& value);

}  // namespace l5pg::config
