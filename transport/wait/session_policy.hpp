// The policy of one wait of a session end, as the shim's channel decides it and the
// microbenchmark measures it: none() when this is the waiter's only session and both
// ends are confined to the same single CPU (cpu_hint.hpp: spinning cannot pay, the peer
// needs this CPU); none() while the CPUs are crowded (crowding_gauge.hpp) and this thread
// is not confined to one CPU; otherwise what AdaptiveSpin granted of the configured policy.
//
// Why not for a thread confined to one CPU: placed there by an operator (taskset, a cpuset),
// its peers are most likely elsewhere, and the threads it waits behind are its own kind
// (other clients that spin too), which the gauge cannot tell from backends with work.
// Measured on 2 vCPUs, 2 clients confined to one CPU and l5pgd and Postgres to the other:
// spinning 43.9k point reads/s, blocking 25.2k (docs/performance.md).
#pragma once

#include <atomic>
#include <cstdint>

#include "transport/wait/adaptive_spin.hpp"
#include "transport/wait/cpu_hint.hpp"
#include "transport/wait/crowding_gauge.hpp"
#include "transport/wait/policy.hpp"

namespace l5pg::wait {

struct SessionHints {
    SoleCpuHint& mine;                // this thread's hint, refreshed now and then
    std::atomic<uint32_t>& my_field;  // where this end publishes it (segment header)
    const std::atomic<uint32_t>& peer_field;
    CrowdingGauge* gauge = nullptr;  // this thread's, when the waiter blocks while crowded
};

[[nodiscard]] inline WaitPolicy session_wait_policy(const SessionHints& hints, bool only_session,
                                                    const AdaptiveSpin& spin,
                                                    const WaitPolicy& configured) noexcept {
    const auto now = SoleCpuHint::clock::now();
    const uint32_t mine = hints.mine.current(now);
    if (publish_and_compare(hints.my_field, hints.peer_field, mine) && only_session)
        return WaitPolicy::none();
    if (mine == 0 && hints.gauge != nullptr && hints.gauge->crowded(now, read_sched_times))
        return WaitPolicy::none();
    return spin.budget(configured);
}

}  // namespace l5pg::wait
