// The first two phases of every wait: spin with `pause`, then sched_yield, within a
// WaitPolicy's budgets. block.hpp adds the third (arm, re-check, block on the doorbell).
#pragma once

#include <chrono>

#include "transport/wait/policy.hpp"

namespace l5pg::wait {

inline void cpu_relax() noexcept {
    __builtin_ia32_pause();
}

void sched_yield_noexcept() noexcept;

// Spins, then yields, until `ready()` is true or the budget is spent. Returns ready().
template <class Ready>
[[nodiscard]] bool spin_then_yield(Ready&& ready, const WaitPolicy& policy) noexcept {
    using clock = std::chrono::steady_clock;
    if (ready())
        return true;
    if (policy.spin.count() <= 0 && policy.yield.count() <= 0)
        return false;
    const auto start = clock::now();
    for (;;) {
        for (int k = 0; k < 64; ++k) {
            if (ready())
                return true;
            cpu_relax();
        }
        switch (policy.phase_after(clock::now() - start)) {
            case Phase::Block:
                return ready();
            case Phase::Yield:
                sched_yield_noexcept();
                break;
            case Phase::Spin:
                break;
        }
    }
}

}  // namespace l5pg::wait
