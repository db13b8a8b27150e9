// Defaults and bounds of the wait budgets (policy.hpp), defined once: the shim's
// L5PG_SPIN_US / L5PG_YIELD_US (clientlib/settings.cpp), l5pgd's shm.spin_us /
// shm.yield_us (config/) and the microbenchmark's --spin-us / --yield-us read them here.
// Plain integers, no <chrono>: the config loader includes this too.
#pragma once

#include <cstdint>

namespace l5pg::wait {

// L5 §III-A-3: spin long enough to catch an answer that is already on its way (a round
// trip through Postgres for a point read), yield a while longer so a peer sharing our CPU
// can run, then block on the doorbell socket.
inline constexpr uint32_t kDefaultSpinUs = 50;
inline constexpr uint32_t kDefaultYieldUs = 200;
// Upper bound of either budget in configuration and the environment: one second.
inline constexpr uint32_t kMaxBudgetUs = 1'000'000;

}  // namespace l5pg::wait
