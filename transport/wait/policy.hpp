// The one policy object of a blocking wait (block.hpp, spin.hpp, l5pgd's idle worker):
// how long to spin with `pause`, then how long to sched_yield, before blocking on the
// doorbell. The configured policy comes from defaults.hpp, the environment (shim) or the
// config file (l5pgd); the policy of one wait is that one as AdaptiveSpin
// (adaptive_spin.hpp) has learnt it pays, or none() when the placement hints
// (cpu_hint.hpp) say spinning cannot pay.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "transport/wait/defaults.hpp"

namespace l5pg::wait {

// What a waiter does after having waited some time under a policy.
enum class Phase { Spin, Yield, Block };

struct WaitPolicy {
    std::chrono::nanoseconds spin{std::chrono::microseconds(kDefaultSpinUs)};
    std::chrono::nanoseconds yield{std::chrono::microseconds(kDefaultYieldUs)};

    [[nodiscard]] static constexpr WaitPolicy none() noexcept {
        return {std::chrono::nanoseconds{0}, std::chrono::nanoseconds{0}};
    }
    [[nodiscard]] static constexpr WaitPolicy from_us(uint32_t spin_us,
                                                      uint32_t yield_us) noexcept {
        return {std::chrono::microseconds(spin_us), std::chrono::microseconds(yield_us)};
    }
    [[nodiscard]] constexpr std::chrono::nanoseconds total() const noexcept { return spin + yield; }
    // This policy cut to a wait that may last `left` at most (a caller's timeout).
    [[nodiscard]] constexpr WaitPolicy within(std::chrono::nanoseconds left) const noexcept {
        const std::chrono::nanoseconds cut_spin = std::min(spin, left);
        return {cut_spin, std::min(yield, left - cut_spin)};
    }
    [[nodiscard]] constexpr Phase phase_after(std::chrono::nanoseconds waited) const noexcept {
        if (waited >= total())
            return Phase::Block;
        return waited >= spin ? Phase::Yield : Phase::Spin;
    }
};

}  // namespace l5pg::wait
