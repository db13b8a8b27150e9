// The shim's settings, read once from the environment when the library is loaded.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/shm/wait.hpp"

namespace l5pg::shim {

enum class TransportMode { Auto, Off };

struct Settings {
    TransportMode mode = TransportMode::Auto;  // L5PG_TRANSPORT=auto|shm|off
    bool debug = false;                        // L5PG_DEBUG=1
    size_t ring_size = 0;                      // L5PG_RING_SIZE, bytes per direction
    shm::WaitBudget budget;                    // L5PG_SPIN_US, L5PG_YIELD_US
    int upgrade_timeout_ms = 5000;             // L5PG_UPGRADE_TIMEOUT_MS
};

// Parses the environment (not async-signal-safe: call from the library constructor).
void load_settings() noexcept;
[[nodiscard]] const Settings& settings() noexcept;

}  // namespace l5pg::shim
