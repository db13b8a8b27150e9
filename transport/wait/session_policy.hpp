// The policy of one wait of a session end, as the shim's channel decides it and the
// microbenchmark measures it: none() when this is the waiter's only session and both
// ends are confined to the same single CPU (cpu_hint.hpp: spinning cannot pay, the peer
// needs this CPU); otherwise what AdaptiveSpin granted of the configured policy.
#pragma once

#include <atomic>
#include <cstdint>

#include "transport/wait/adaptive_spin.hpp"
#include "transport/wait/cpu_hint.hpp"
#include "transport/wait/policy.hpp"

namespace l5pg::wait {

struct SessionHints {
    SoleCpuHint& mine;                // this thread's hint, refreshed now and then
    std::atomic<uint32_t>& my_field;  // where this end publishes it (segment header)
    const std::atomic<uint32_t>& peer_field;
};

[[nodiscard]] inline WaitPolicy session_wait_policy(const SessionHints& hints, bool only_session,
                                                    const AdaptiveSpin& spin,
                                                    const WaitPolicy& configured) noexcept {
    const uint32_t mine = hints.mine.current(SoleCpuHint::clock::now());
    if (publish_and_compare(hints.my_field, hints.peer_field, mine) && only_session)
        return WaitPolicy::none();
    return spin.budget(configured);
}

}  // namespace l5pg::wait
