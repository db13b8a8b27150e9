// l5pgd configuration: one YAML file plus `-o key=value` overrides, validated at start.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace l5pg::config {

// Thrown for any invalid configuration. what() names the key and the reason, e.g.
// "listen.port: must be between 1 and 65535 (got 70000)".
class ConfigError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

struct ListenConfig {
    std::string unix_socket_dir = "/var/run/l5pg";  // "" disables the Unix listener
    uint16_t port = 6432;                           // .s.PGSQL.<port> and TCP port
    std::string tcp_address = "127.0.0.1";          // "" disables the TCP listener
    int backlog = 128;
    uint32_t unix_socket_mode = 0777;  // octal in YAML ("0770")
};

struct UpstreamConfig {
    std::string unix_socket_dir = "/var/run/postgresql";  // used when host is ""
    std::string host;                                     // TCP host, optional
    uint16_t port = 5432;
    uint32_t connect_timeout_ms = 5000;
};

struct WorkersConfig {
    unsigned count = 2;
    std::vector<int> cpu_affinity;  // empty: no pinning; else worker i -> cpus[i % n]
};

struct ShmConfig {
    bool enabled = true;
    uint64_t max_ring_size = uint64_t{16} << 20;  // largest ring a client may ask for
    uint32_t spin_us = 50;                        // worker busy-poll budget when idle
    uint32_t yield_us = 200;                      // then sched_yield budget, then block
    // Keep spinning while every busy session waits for Postgres's answer (instead of
    // blocking in epoll until the upstream socket is readable). See worker.cpp.
    bool spin_awaiting_upstream = false;
};

// L5 RDMA channel for remote clients (DESIGN.md "RDMA channel"): clients upgrade their
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
    // A signaled RDMA request without completion for this long fails the session.
    uint32_t completion_timeout_ms = 10000;
    // soft device only: TCP port (on listen.tcp_address) for the soft device's wire
    // connections; 0 = a free port picked at start (announced to clients in the upgrade).
    uint16_t soft_port = 0;
};

struct MetricsConfig {
    std::string listen = "127.0.0.1:9187";  // host:port; "" disables
};

struct LimitsConfig {
    unsigned max_sessions = 1000;
    uint32_t startup_timeout_ms = 10000;  // client must finish its startup packet by then
    // After a client left: how long its session may take to hand what it published to
    // Postgres and see Postgres close (daemon/session_depart.cpp).
    uint32_t drain_timeout_ms = 10000;
};

struct LoggingConfig {
    std::string level = "info";  // trace, debug, info, warn, error, critical, off
};

struct Config {
    ListenConfig listen;
    UpstreamConfig upstream;
    WorkersConfig workers;
    ShmConfig shm;
    RdmaConfig rdma;
    MetricsConfig metrics;
    LimitsConfig limits;
    LoggingConfig logging;
};

// Loads `path` (empty: defaults only), applies `overrides` ("listen.port=6433", dotted
// keys as in the YAML), validates. Unknown keys are errors (typos must not pass).
[[nodiscard]] Config load(const std::string& path, const std::vector<std::string>& overrides);

// Same, from YAML text (for tests).
[[nodiscard]] Config load_from_string(const std::string& yaml,
                                      const std::vector<std::string>& overrides);

// Splits "host:port" / "[v6]:port". Throws ConfigError naming `key`.
[[nodiscard]] std::pair<std::string, uint16_t> parse_host_port(const std::string& key,
                                                               const std::string& value);

}  // namespace l5pg::config
