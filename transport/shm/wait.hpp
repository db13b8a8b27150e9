// Adaptive waiting and the doorbell (L5 §III-A-3): spin with `pause` for a budget, then
// sched_yield for a budget, then block on the session socket.
//
// No lost wake-up (Dekker): the waiter arms its flag, issues a seq_cst fence and re-reads
// the ring before blocking; the other side publishes, issues a seq_cst fence and reads
// the flag. With both fences, at least one of them sees the other's store: either the
// waiter sees the new data and does not block, or the publisher sees the flag and writes
// a doorbell byte to the socket, which makes the blocked poll() return.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace l5pg::shm {

struct WaitBudget {
    std::chrono::nanoseconds spin{std::chrono::microseconds(50)};
    std::chrono::nanoseconds yield{std::chrono::microseconds(200)};
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
// Reads and discards every doorbell byte currently queued (non-blocking). `count` gets
// the number of bytes discarded. PeerClosed when recv returns 0.
[[nodiscard]] DrainResult drain_doorbells(int sock, size_t& count) noexcept;

// Spins, then yields, until `ready()` is true or the budget is spent. Returns ready().
template <class Ready>
[[nodiscard]] bool spin_then_yield(Ready&& ready, const WaitBudget& budget) noexcept {
    using clock = std::chrono::steady_clock;
    if (ready())
        return true;
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
