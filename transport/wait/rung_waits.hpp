// The waits of l5pgd's workers that a client process has rung already (the shim's half of
// "one doorbell per wait"; daemon/doorbell_coalescer.hpp is l5pgd's half).
//
// Before a worker blocks, it arms every SHM session it serves under one name for that block
// (Worker::arm_sessions). One doorbell byte ends the block, and the woken worker looks at
// every ring before it blocks again. Without names, a pgbench with 64 clients on two workers
// wrote 0.66 doorbells per transaction, about 20 per block of a worker (docs/performance.md,
// "One doorbell per worker block"). With them, each client process rings a block once.
//
// Shared by every thread of the process, lock-free. A thread records a name only after its
// doorbell went out, so a name found means that this block of the worker ends (or has
// ended: the worker then polls every ring before it blocks again). Recording first would
// skip doorbells for a send() that then fails (no byte at all), and would let a thread
// skip while the recorder, preempted before its send(), still holds the wake-up back. Two
// threads may both miss and both ring: harmless. Overwriting a name that is still live (more
// than 8 workers blocked at once) only costs a doorbell more. Names are unique per daemon
// and start at a random number in each, so names of different daemons do not meet.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "transport/wait/wait_id.hpp"

namespace l5pg::wait {

class RungWaits {
  public:
    // True when a doorbell for this wait went out from this process recently (then none is
    // needed). Unnamed waits never count as rung.
    [[nodiscard]] bool rung(uint64_t wait_id) const noexcept {
        if (wait_id == kUnnamedWait)
            return false;
        // Acquire, paired with remember(): a name found comes after the doorbell that went
        // out for it (plain loads on x86). Safety does not rest on it: what the worker reads
        // after waking is ordered by the flags, not by this table.
        for (const std::atomic<uint64_t>& slot : slots_)
            if (slot.load(std::memory_order_acquire) == wait_id)
                return true;
        return false;
    }

    // After the doorbell for a wait went out.
    void remember(uint64_t wait_id) noexcept {
        if (wait_id == kUnnamedWait)
            return;
        const size_t i = next_.fetch_add(1, std::memory_order_relaxed) % slots_.size();
        slots_[i].store(wait_id, std::memory_order_release);
    }

    // In a forked child: its sessions are its own, and it rings for them itself. (Not
    // needed for safety: any process's doorbell wakes the worker.)
    void forget() noexcept {
        for (std::atomic<uint64_t>& slot : slots_)
            slot.store(kUnnamedWait, std::memory_order_relaxed);
    }

  private:
    // The blocks of the workers serving this process (l5pgd has one per CPU by default).
    std::array<std::atomic<uint64_t>, 8> slots_{};
    std::atomic<size_t> next_{0};
};

}  // namespace l5pg::wait
