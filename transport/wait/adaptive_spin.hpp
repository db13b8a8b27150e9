// Learns whether spinning pays, i.e. which part of the configured WaitPolicy one wait gets.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "transport/wait/policy.hpp"

namespace l5pg::wait {

// Spinning wins when the other side answers within the budget; when waits routinely
// outlast it (a loaded machine, many sessions sharing few cores, an idle connection) every
// spin is CPU taken from the process we wait for. Keeps an exponentially weighted average
// (weight 1/8) of how long recent waits took, spun or blocked: within the spin budget it
// grants spin and yield; within the total only the yield phase (the peer likely shares our
// CPU and needs it to answer); beyond, nothing. A blocked wait includes the wake-up
// latency, so the estimate errs towards spinning. Samples are capped at twice the budget,
// so one long idle period is forgotten after a handful of short waits. Relaxed atomics: a
// racy update from two threads sharing a connection only blurs the estimate.
class AdaptiveSpin {
  public:
    [[nodiscard]] WaitPolicy budget(const WaitPolicy& configured) const noexcept {
        const int64_t average = average_ns_.load(std::memory_order_relaxed);
        if (average > configured.total().count())
            return WaitPolicy::none();
        if (average > configured.spin.count())  // answers come while yielding: skip the spin
            return WaitPolicy{std::chrono::nanoseconds{0}, configured.yield};
        return configured;
    }
    void reset() noexcept { average_ns_.store(0, std::memory_order_relaxed); }
    void record(std::chrono::nanoseconds waited, const WaitPolicy& configured) noexcept {
        const int64_t cap = 2 * configured.total().count();
        const int64_t sample = std::min<int64_t>(waited.count(), cap);
        const int64_t average = average_ns_.load(std::memory_order_relaxed);
        average_ns_.store(average + (sample - average) / 8, std::memory_order_relaxed);
    }

  private:
    std::atomic<int64_t> average_ns_{0};
};

}  // namespace l5pg::wait
