// The physical floor: two processes bounce a counter through two cache lines of one
// MAP_SHARED page. No ring, no records, no fences beyond acquire/release.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "bench/microbench/pingpong.hpp"
#include "bench/microbench/pingpong_loop.hpp"
#include "bench/microbench/shm_link.hpp"
#include "transport/wait/spin.hpp"

namespace l5pg::microbench {
namespace {

// 128-byte spacing keeps the lines apart from the adjacent-line prefetcher as well.
struct alignas(128) Line {
    std::atomic<uint64_t> value{0};
};
struct Lines {
    Line ping;  // client -> server
    Line pong;  // server -> client
};
static_assert(sizeof(Lines) == 256);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// Spins until `line` holds something other than `old`; returns it.
uint64_t wait_change(const Line& line, uint64_t old, const char* what) {
    StallGuard guard(what);
    for (uint32_t i = 1;; ++i) {
        const uint64_t v = line.value.load(std::memory_order_acquire);
        if (v != old)
            return v;
        wait::cpu_relax();
        if ((i & 0xffff) == 0)
            guard.tick();
    }
}

}  // namespace

PingPongRun pingpong_cacheline(const Timing& timing, const Placement& placement) {
    Mapping page(4096, Mapping::Kind::Shared);
    Lines* lines = std::construct_at(reinterpret_cast<Lines*>(page.data()));
    // Values on the wire are seq + 1, so that 0 means "nothing yet".
    auto server = [lines](ChildReport& report) {
        for (uint64_t last = 0;;) {
            const uint64_t v = wait_change(lines->ping, last, "the server waits for a ping");
            if (v != last + 1 && v != kStopSeq)
                throw BenchError("server: ping " + std::to_string(v) + " after " +
                                 std::to_string(last));
            lines->pong.value.store(v, std::memory_order_release);
            if (v == kStopSeq) {
                report.count[0].store(last);
                return kChildOk;
            }
            last = v;
        }
    };
    auto client = [lines, &timing] {
        constexpr const char* kWhat = "the client waits for a pong";
        auto round_trip = [&](uint64_t seq) {
            const uint64_t v = seq + 1;
            lines->ping.value.store(v, std::memory_order_release);
            const uint64_t got = wait_change(lines->pong, seq, kWhat);
            if (got != v)
                throw BenchError("client: pong " + std::to_string(got) + " for ping " +
                                 std::to_string(v));
        };
        uint64_t seq = 0;
        PingPongRun run = timed_loop(round_trip, timing, seq);
        lines->ping.value.store(kStopSeq, std::memory_order_release);
        (void)wait_change(lines->pong, seq, kWhat);
        return run;
    };
    return run_two_processes(placement, server, client);
}

}  // namespace l5pg::microbench
