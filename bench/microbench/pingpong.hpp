// Ping-pong round trips between two processes over one transport.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/microbench/placement.hpp"
#include "transport/wait/policy.hpp"

namespace l5pg::microbench {

inline constexpr size_t kMinMessage = 16;  // sequence number at both ends of each message
inline constexpr size_t kMaxMessage = size_t{1} << 20;
inline constexpr size_t kCacheLineMessage = 8;  // the floor moves one uint64_t each way

struct Timing {
    double warmup_seconds = 0.1;
    double seconds = 1.0;
};

struct PingPongRun {
    double round_trips_per_second = 0;
    uint64_t round_trips = 0;  // timed ones
    double elapsed_seconds = 0;
    uint64_t polls = 0;      // SHM adaptive: times the client blocked in poll()
    uint64_t doorbells = 0;  // SHM adaptive: doorbell bytes the client sent
};

struct PingPongCell {
    std::string transport;
    size_t msg_bytes = 0;
    size_t ring_bytes = 0;  // SHM transports only
    wait::WaitPolicy budget;
};

// In report order: cacheline, shm-spin, shm, shm-block, shm-local, unix, tcp, pipe.
[[nodiscard]] std::vector<std::string> pingpong_transports();
[[nodiscard]] bool is_pingpong_transport(const std::string& name);
[[nodiscard]] bool transport_uses_ring(const std::string& name);
[[nodiscard]] bool transport_has_msg_size(const std::string& name);  // false: cacheline
[[nodiscard]] std::string transport_description(const std::string& name);

// One run: fork, warm up, time, stop, verify. Throws BenchError on any failure.
[[nodiscard]] PingPongRun run_pingpong(const PingPongCell& cell, const Timing& timing,
                                       const Placement& placement);

// Per-transport implementations (pingpong_*.cpp).
[[nodiscard]] PingPongRun pingpong_cacheline(const Timing& timing, const Placement& placement);
enum class FdKind { Unix, Tcp, Pipe };
[[nodiscard]] PingPongRun pingpong_fd(FdKind kind, size_t msg_bytes, const Timing& timing,
                                      const Placement& placement);
[[nodiscard]] PingPongRun pingpong_shm(bool spin_only, size_t msg_bytes, size_t ring_bytes,
                                       wait::WaitPolicy budget, const Timing& timing,
                                       const Placement& placement);
// Both ends in the calling thread: the ring's own cost per round trip, no cross-core traffic.
[[nodiscard]] PingPongRun pingpong_shm_local(size_t msg_bytes, size_t ring_bytes,
                                             wait::WaitPolicy budget, const Timing& timing);

}  // namespace l5pg::microbench
