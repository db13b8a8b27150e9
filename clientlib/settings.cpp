#include "clientlib/settings.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "clientlib/debug_log.hpp"
#include "transport/shm/layout.hpp"

namespace l5pg::shim {
namespace {

Settings g_settings;

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

}  // namespace

void load_settings() noexcept {
    Settings s;
    if (const char* debug = std::getenv("L5PG_DEBUG"); debug && *debug && std::strcmp(debug, "0"))
        s.debug = true;
    set_debug_enabled(s.debug);
    if (const char* mode = std::getenv("L5PG_TRANSPORT"); mode && *mode) {
        if (std::strcmp(mode, "off") == 0)
            s.mode = TransportMode::Off;
        else if (std::strcmp(mode, "auto") != 0 && std::strcmp(mode, "shm") != 0)
            debug_log().str("L5PG_TRANSPORT=").str(mode).str(" is unknown, using auto").end();
    }
    s.ring_size =
        env_number("L5PG_RING_SIZE", shm::kDefaultRingSize, shm::kMinRingSize, shm::kMaxRingSize);
    if (!shm::valid_ring_size(s.ring_size)) {
        debug_log().str("L5PG_RING_SIZE is not a power of two, using the default").end();
        s.ring_size = shm::kDefaultRingSize;
    }
    s.budget.spin = std::chrono::microseconds(env_number("L5PG_SPIN_US", 50, 0, 1000000));
    s.budget.yield = std::chrono::microseconds(env_number("L5PG_YIELD_US", 200, 0, 1000000));
    s.upgrade_timeout_ms = static_cast<int>(env_number("L5PG_UPGRADE_TIMEOUT_MS", 5000, 1, 600000));
    g_settings = s;
}

const Settings& settings() noexcept {
    return g_settings;
}

}  // namespace l5pg::shim
