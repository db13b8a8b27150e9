#include "clientlib/settings.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "clientlib/debug_log.hpp"
#include "transport/ring_bounds.hpp"
#include "transport/wait/defaults.hpp"

namespace l5pg::shim {
namespace {

Settings g_settings;

struct SslModeName {
    const char* name;
    SslMode mode;
};
constexpr SslModeName kSslModes[] = {{"disable", SslMode::Disable},
                                     {"prefer", SslMode::Prefer},
                                     {"require", SslMode::Require},
                                     {"verify-ca", SslMode::VerifyCa},
                                     {"verify-full", SslMode::VerifyFull}};

// Reads an unsigned integer variable; a malformed or out-of-range value keeps the
// default and, with L5PG_DEBUG, says so (the shim must never break the application).
uint64_t env_number(const char* name, uint64_t fallback, uint64_t min, uint64_t max) {
    const char* text = std::getenv(name);
    if (text == nullptr || *text == '\0')
        return fallback;
    char* end = nullptr;
    errno = 0;
    const unsigned long long value = std::strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0' || value < min || value > max) {
        debug_log().str(name).str("=").str(text).str(" is invalid, using ").num(fallback).end();
        return fallback;
    }
    return value;
}

void load_rdma_settings(Settings& s) {
    if (const char* device = std::getenv("L5PG_RDMA_DEVICE"); device && *device) {
        if (!rdma::parse_device_kind(device, s.rdma_device))
            debug_log().str("L5PG_RDMA_DEVICE=").str(device).str(" is unknown, using auto").end();
    }
    if (const char* ports = std::getenv("L5PG_RDMA_PORTS"); ports && *ports) {
        const char* p = ports;
        while (*p != '\0') {
            char* end = nullptr;
            errno = 0;
            const unsigned long port = std::strtoul(p, &end, 10);
            if (end == p || errno != 0 || port == 0 || port > 65535 ||
                (*end != ',' && *end != '\0')) {
                debug_log()
                    .str("L5PG_RDMA_PORTS=")
                    .str(ports)
                    .str(" is invalid (want e.g. 6432,6433)")
                    .end();
                s.rdma_port_count = 0;
                break;
            }
            if (s.rdma_port_count < kMaxRdmaPorts)
                s.rdma_ports[s.rdma_port_count++] = static_cast<uint16_t>(port);
            else
                debug_log()
                    .str("L5PG_RDMA_PORTS lists more than ")
                    .num(kMaxRdmaPorts)
                    .str(" ports: port ")
                    .num(port)
                    .str(" is not used")
                    .end();
            p = *end == ',' ? end + 1 : end;
        }
    }
    if (s.mode == TransportMode::Rdma && s.rdma_port_count == 0)
        debug_log()
            .str(
                "L5PG_TRANSPORT=rdma but L5PG_RDMA_PORTS lists no port: no TCP connection will be "
                "upgraded")
            .end();
    if (const char* name = std::getenv("L5PG_RDMA_DEVICE_NAME"); name && *name) {
        std::strncpy(s.rdma_device_name, name, sizeof s.rdma_device_name - 1);
    }
    s.rdma_device_port = static_cast<uint8_t>(env_number("L5PG_RDMA_DEVICE_PORT", 1, 1, 255));
    // -1 (the default): LID routing, no GID; an invalid value keeps the default.
    if (const char* gid = std::getenv("L5PG_RDMA_GID_INDEX");
        gid && *gid && std::strcmp(gid, "-1")) {
        constexpr uint64_t kNone = 256;
        const uint64_t index = env_number("L5PG_RDMA_GID_INDEX", kNone, 0, 255);
        s.rdma_gid_index = index == kNone ? -1 : static_cast<int>(index);
    }
}

void copy_env(const char* name, char* out, size_t size) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0')
        return;
    if (std::strlen(value) >= size) {
        debug_log().str(name).str(" is too long, ignored").end();
        return;
    }
    std::strcpy(out, value);
}

void load_tls_settings(Settings& s) {
    if (const char* mode = std::getenv("L5PG_SSLMODE"); mode && *mode) {
        bool known = false;
        for (const SslModeName& m : kSslModes) {
            if (std::strcmp(mode, m.name) == 0) {
                s.ssl_mode = m.mode;
                known = true;
            }
        }
        if (!known) {  // the safe reading of a typo: verify everything
            debug_log().str("L5PG_SSLMODE=").str(mode).str(" is unknown, using verify-full").end();
            s.ssl_mode = SslMode::VerifyFull;
        }
    }
    copy_env("L5PG_SSLROOTCERT", s.ssl_root_cert, sizeof s.ssl_root_cert);
    if (s.ssl_root_cert[0] == '\0') {
        if (const char* home = std::getenv("HOME");
            home && *home && std::strlen(home) + 32 < sizeof s.ssl_root_cert) {
            std::strcpy(s.ssl_root_cert, home);
            std::strcat(s.ssl_root_cert, "/.postgresql/root.crt");
        }
    }
    copy_env("L5PG_SSLCERT", s.ssl_cert, sizeof s.ssl_cert);
    copy_env("L5PG_SSLKEY", s.ssl_key, sizeof s.ssl_key);
    copy_env("L5PG_SSLHOST", s.ssl_host, sizeof s.ssl_host);
}

}  // namespace

void load_settings() {
    Settings s;
    if (const char* debug = std::getenv("L5PG_DEBUG"); debug && *debug && std::strcmp(debug, "0"))
        s.debug = true;
    set_debug_enabled(s.debug);
    if (const char* mode = std::getenv("L5PG_TRANSPORT"); mode && *mode) {
        if (std::strcmp(mode, "off") == 0)
            s.mode = TransportMode::Off;
        else if (std::strcmp(mode, "rdma") == 0)
            s.mode = TransportMode::Rdma;
        else if (std::strcmp(mode, "auto") != 0 && std::strcmp(mode, "shm") != 0)
            debug_log().str("L5PG_TRANSPORT=").str(mode).str(" is unknown, using auto").end();
    }
    s.ring_size = env_number("L5PG_RING_SIZE", transport::kDefaultRingSize, transport::kMinRingSize,
                             transport::kMaxRingSize);
    if (!transport::valid_ring_size(s.ring_size)) {
        debug_log().str("L5PG_RING_SIZE is not a power of two, using the default").end();
        s.ring_size = transport::kDefaultRingSize;
    }
    s.budget = wait::WaitPolicy::from_us(
        static_cast<uint32_t>(
            env_number("L5PG_SPIN_US", wait::kDefaultSpinUs, 0, wait::kMaxBudgetUs)),
        static_cast<uint32_t>(
            env_number("L5PG_YIELD_US", wait::kDefaultYieldUs, 0, wait::kMaxBudgetUs)));
    s.block_when_crowded = env_number("L5PG_BLOCK_WHEN_CROWDED", 1, 0, 1) == 1;
    s.upgrade_timeout_ms = static_cast<int>(env_number("L5PG_UPGRADE_TIMEOUT_MS", 5000, 1, 600000));
    if (const char* uid = std::getenv("L5PG_TRUSTED_UID"); uid && *uid)
        s.trusted_uid = static_cast<int64_t>(env_number("L5PG_TRUSTED_UID", 0, 0, UINT32_MAX - 1));
    load_rdma_settings(s);
    load_tls_settings(s);
    g_settings = s;
}

const char* to_string(SslMode mode) {
    for (const SslModeName& m : kSslModes)
        if (m.mode == mode)
            return m.name;
    return "?";
}

bool is_rdma_port(uint16_t port) {
    if (g_settings.mode != TransportMode::Rdma)
        return false;
    for (size_t i = 0; i < g_settings.rdma_port_count; ++i)
        if (g_settings.rdma_ports[i] == port)
            return true;
    return false;
}

const Settings& settings() {
    return g_settings;
}

}  // namespace l5pg::shim
