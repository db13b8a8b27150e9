// Placement hints (shm/layout.hpp, Header::client_sole_cpu / server_sole_cpu): each side says
// which single CPU its waiting thread is confined to, if it is confined to one.
//
// When both ends of a session are confined to the same CPU (taskset, a one-CPU cpuset or
// container), spinning or yielding for the peer cannot pay: the peer needs the very CPU the
// waiter holds to produce what it waits for, so every spin round only delays the answer.
// Measured on 2 vCPUs with pgbench, l5pgd and Postgres all on one CPU: 9.6k tps spinning
// versus 18k blocking straight away (docs/performance.md). The hints are advisory: a wrong
// or hostile value only changes whether this side spins.
#pragma once

#include <sched.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>

namespace l5pg::wait {

// CPU + 1 when the calling thread's affinity mask holds exactly one CPU, else 0 (also when
// sched_getaffinity fails). One system call.
[[nodiscard]] uint32_t sole_cpu_of_this_thread() noexcept;

// True when both hints name the same CPU (0 is "not confined", never a match).
[[nodiscard]] constexpr bool same_sole_cpu(uint32_t mine, uint32_t peers) noexcept {
    return mine != 0 && mine == peers;
}

// This side's hint, re-read from the affinity at most every kRefreshNs: affinity changes
// rarely (taskset -p, cpuset updates) and a system call per wait would cost a spinning
// ping-pong measurably. Relaxed atomics: threads racing on a refresh only repeat it.
class SoleCpuHint {
  public:
    using clock = std::chrono::steady_clock;
    static constexpr int64_t kRefreshNs = 100'000'000;

    // The hint, re-read first when the last reading is older than kRefreshNs at `now`.
    [[nodiscard]] uint32_t current(clock::time_point now) noexcept {
        const int64_t now_ns =
            std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
        const int64_t due = next_check_ns_.load(std::memory_order_relaxed);
        if (now_ns >= due) {
            next_check_ns_.store(now_ns + kRefreshNs, std::memory_order_relaxed);
            value_.store(sole_cpu_of_this_thread(), std::memory_order_relaxed);
        }
        return value_.load(std::memory_order_relaxed);
    }

  private:
    std::atomic<int64_t> next_check_ns_{0};
    std::atomic<uint32_t> value_{0};
};

// The CPU the calling thread runs on + 1, published into `field` when it changed (the line
// then stays shared in both caches). sched_getcpu() reads the rseq area or the vDSO: no
// system call.
inline void publish_current_cpu(std::atomic<uint32_t>& field) noexcept {
    const int saved_errno = errno;  // the shim runs inside other programs
    const int cpu = ::sched_getcpu();
    errno = saved_errno;
    const uint32_t value = cpu >= 0 ? static_cast<uint32_t>(cpu) + 1 : 0;
    if (field.load(std::memory_order_relaxed) != value)
        field.store(value, std::memory_order_relaxed);
}

// Publishes `mine` into this side's header field (only when it changed: the line then stays
// shared in both caches) and tells whether the peer's field names the same single CPU.
[[nodiscard]] inline bool publish_and_compare(std::atomic<uint32_t>& my_field,
                                              const std::atomic<uint32_t>& peer_field,
                                              uint32_t mine) noexcept {
    if (my_field.load(std::memory_order_relaxed) != mine)
        my_field.store(mine, std::memory_order_relaxed);
    return same_sole_cpu(mine, peer_field.load(std::memory_order_relaxed));
}

}  // namespace l5pg::wait
