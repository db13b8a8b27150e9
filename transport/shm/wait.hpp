// Adaptive waiting and the doorbell (L5 §III-A-3): spin with `pause` for a budget, then
// sched_yield for a budget, then block on the session socket.
//
// No lost wake-up (Dekker): the waiter arms its flag, issues a seq_cst fence and re-reads
// the ring before blocking; the other side publishes, issues a seq_cst fence and reads
// the flag. With both fences, at least one of them sees the other's store: either the
// waiter sees the new data and does not block, or the publisher sees the flag and writes
// a doorbell byte to the socket, which makes the blocked poll() return.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace l5pg::shm {

struct WaitBudget {
    std::chrono::nanoseconds spin{std::chrono::microseconds(50)};
    std::chrono::nanoseconds yield{std::chrono::microseconds(200)};

    [[nodiscard]] static constexpr WaitBudget none() noexcept {
        return {std::chrono::nanoseconds{0}, std::chrono::nanoseconds{0}};
    }
    [[nodiscard]] constexpr std::chrono::nanoseconds total() const noexcept { return spin + yield; }
};

// Learns whether spinning pays. Spinning wins when the other side answers within the
// budget; when waits routinely outlast it (a loaded machine, many sessions sharing few
// cores, an idle connection) every spin is CPU taken from the process we wait for.
// Keeps an exponentially weighted average (weight 1/8) of how long recent waits took,
// spun or blocked: within the spin budget it grants spin and yield; within the total
// only the yield phase (the peer likely shares our CPU and needs it to answer);
// beyond, nothing. A blocked wait includes the wake-up latency, so the estimate errs towards
// spinning. Samples are capped at twice the budget, so one long idle period is
// forgotten after a handful of short waits. Relaxed atomics: a racy update from two
// threads sharing a connection only blurs the estimate.
class AdaptiveSpin {
  public:
    [[nodiscard]] WaitBudget budget(const WaitBudget& configured) const noexcept {
        const int64_t average = average_ns_.load(std::memory_order_relaxed);
        if (average > configured.total().count())
            return WaitBudget::none();
        if (average > configured.spin.count())  // answers come while yielding: skip the spin
            return WaitBudget{std::chrono::nanoseconds{0}, configured.yield};
        return configured;
    }
    void reset() noexcept { average_ns_.store(0, std::memory_order_relaxed); }
    void record(std::chrono::nanoseconds waited, const WaitBudget& configured) noexcept {
        const int64_t cap = 2 * configured.total().count();
        const int64_t sample = std::min<int64_t>(waited.count(), cap);
        const int64_t average = average_ns_.load(std::memory_order_relaxed);
        average_ns_.store(average + (sample - average) / 8, std::memory_order_relaxed);
    }

  private:
    std::atomic<int64_t> average_ns_{0};
};

inline void cpu_relax() noexcept {
    __builtin_ia32_pause();
}

void sched_yield_noexcept() noexcept;

// Writes one doorbell byte (MSG_DONTWAIT|MSG_NOSIGNAL). A full socket buffer already
// means the peer has a pending wake-up, so EAGAIN counts as success. Returns false only
// when the peer is gone (EPIPE/ECONNRESET/...). Async-signal-safe.
[[nodiscard]] bool ring_doorbell(int sock) noexcept;

enum class DrainResult { Drained, PeerClosed, Error };
// Reads and discards the doorbell bytes currently queued (non-blocking), at most `budget`
// of them: a peer writing doorbells in a loop must not keep one caller (l5pgd's worker)
// draining for ever. `count` gets the number of bytes discarded; count == budget means
// more may be queued. PeerClosed when recv returns 0.
[[nodiscard]] DrainResult drain_doorbells(int sock, size_t& count,
                                          size_t budget = SIZE_MAX) noexcept;

// Spins, then yields, until `ready()` is true or the budget is spent. Returns ready().
template <class Ready>
[[nodiscard]] bool spin_then_yield(Ready&& ready, const WaitBudget& budget) noexcept {
    using clock = std::chrono::steady_clock;
    if (ready())
        return true;
    if (budget.spin.count() <= 0 && budget.yield.count() <= 0)
        return false;
    const auto start = clock::now();
    for (;;) {
        for (int k = 0; k < 64; ++k) {
            if (ready())
                return true;
            cpu_relax();
        }
        const auto waited = clock::now() - start;
        if (waited >= budget.spin + budget.yield)
            return ready();
        if (waited >= budget.spin)
            sched_yield_noexcept();
    }
}

}  // namespace l5pg::shm
