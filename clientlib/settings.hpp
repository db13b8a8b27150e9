// The shim's settings, read once from the environment when the library is loaded.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/rdma/device.hpp"
#include "transport/wait/policy.hpp"

namespace l5pg::shim {

// auto/shm: Unix-socket connections to l5pgd move onto shared memory. rdma: that, and TCP
// connections to the ports in L5PG_RDMA_PORTS are upgraded to the RDMA channel.
enum class TransportMode { Auto, Off, Rdma };

// L5PG_SSLMODE: TLS for the RDMA upgrade's handshake on the TCP socket (clientlib/
// upgrade_tls.hpp). Like libpq's sslmode, for the shim's own exchange with l5pgd only.
enum class SslMode { Disable, Prefer, Require, VerifyCa, VerifyFull };

inline constexpr size_t kMaxPath = 1024;

inline constexpr size_t kMaxRdmaPorts = 16;

struct Settings {
    TransportMode mode = TransportMode::Auto;  // L5PG_TRANSPORT=auto|shm|rdma|off
    bool debug = false;                        // L5PG_DEBUG=1
    size_t ring_size = 0;                      // L5PG_RING_SIZE, bytes per direction
    wait::WaitPolicy budget;                   // L5PG_SPIN_US, L5PG_YIELD_US
    bool block_when_crowded = true;            // L5PG_BLOCK_WHEN_CROWDED=1|0
    int upgrade_timeout_ms = 5000;             // L5PG_UPGRADE_TIMEOUT_MS
    // L5PG_TRUSTED_UID: the only owner whose l5pgd markers are trusted; -1 = any owner,
    // as long as it also owns the socket (upgrade.cpp, is_l5pgd_socket()).
    int64_t trusted_uid = -1;
    // ---- RDMA (mode rdma)
    rdma::DeviceKind rdma_device = rdma::DeviceKind::Auto;  // L5PG_RDMA_DEVICE=auto|verbs|soft
    uint16_t rdma_ports[kMaxRdmaPorts] = {};                // L5PG_RDMA_PORTS=6432,6433
    size_t rdma_port_count = 0;
    char rdma_device_name[64] = {};  // L5PG_RDMA_DEVICE_NAME (verbs; "" = first device)
    uint8_t rdma_device_port = 1;    // L5PG_RDMA_DEVICE_PORT (verbs, 1-based)
    int rdma_gid_index = -1;         // L5PG_RDMA_GID_INDEX (verbs; -1 = LID routing)
    // ---- TLS around the RDMA upgrade (mode rdma)
    SslMode ssl_mode = SslMode::Prefer;  // L5PG_SSLMODE
    // L5PG_SSLROOTCERT (verify-ca/verify-full; default ~/.postgresql/root.crt, "system" =
    // OpenSSL's default trust store), L5PG_SSLCERT/L5PG_SSLKEY (a client certificate, for
    // an l5pgd with tls.ca_file), L5PG_SSLHOST (the name verify-full checks; default the
    // server's IP address, since the shim never sees the host name libpq was given).
    char ssl_root_cert[kMaxPath] = {};
    char ssl_cert[kMaxPath] = {};
    char ssl_key[kMaxPath] = {};
    char ssl_host[256] = {};
};

// "disable", "prefer", ... as L5PG_SSLMODE spells it.
[[nodiscard]] const char* to_string(SslMode mode);

// mode rdma and `port` listed in L5PG_RDMA_PORTS. Async-signal-safe.
[[nodiscard]] bool is_rdma_port(uint16_t port);

// Parses the environment (not async-signal-safe: call from the library constructor).
void load_settings();
[[nodiscard]] const Settings& settings();

}  // namespace l5pg::shim
