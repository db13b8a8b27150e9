// session_wait_policy(): the placement rule the shim's channel and the microbenchmark share.
#include <catch2/catch.hpp>

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <thread>

#include "transport/wait/session_policy.hpp"

using namespace l5pg::wait;

TEST_CASE("session_wait_policy: no spinning for a lone session whose peer shares our one CPU") {
    const WaitPolicy configured = WaitPolicy::from_us(50, 200);
    WaitPolicy apart, shared, shared_busy;
    uint32_t mine = 0, published = 0;
    int pinned = -1;
    std::thread confined([&] {  // a thread confined to one CPU, as under taskset -c N
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(0, &one);
        pinned = ::pthread_setaffinity_np(::pthread_self(), sizeof one, &one);  // checked below
        SoleCpuHint hint;
        const AdaptiveSpin spin;
        std::atomic<uint32_t> my_field{0};
        std::atomic<uint32_t> peer_field{2};  // the peer: confined to CPU 1
        apart = session_wait_policy({hint, my_field, peer_field}, true, spin, configured);
        published = my_field.load();
        mine = hint.current(SoleCpuHint::clock::now());
        peer_field = 1;  // the peer: confined to CPU 0, ours
        shared = session_wait_policy({hint, my_field, peer_field}, true, spin, configured);
        shared_busy = session_wait_policy({hint, my_field, peer_field}, false, spin, configured);
    });
    confined.join();
    REQUIRE(pinned == 0);
    CHECK(mine == 1);  // CPU 0, as CPU + 1
    CHECK(published == mine);
    CHECK(apart.total() == configured.total());
    CHECK(shared.total() == WaitPolicy::none().total());
    CHECK(shared_busy.total() == configured.total());  // other sessions: spinning may pay
}

namespace {

// A gauge that judged the CPUs crowded just now: it backs off for kMaxBackoff (128 ms).
void make_crowded(CrowdingGauge& gauge) {
    SchedTimes times;
    auto read = [&times] { return std::optional<SchedTimes>(times); };
    auto crowded_window = [&times] {
        times.run_ns += 10'000'000;  // as long waiting for a CPU as running
        times.delay_ns += 10'000'000;
    };
    auto t = CrowdingGauge::clock::now() - std::chrono::seconds(10);
    REQUIRE_FALSE(gauge.crowded(t, read));  // opens a window
    for (int i = 0; i < 3; ++i) {           // back-offs of 16, 32 and 64 ms
        crowded_window();
        t += CrowdingGauge::kWindow;
        REQUIRE(gauge.crowded(t, read));
        t += CrowdingGauge::kMaxBackoff;
        REQUIRE_FALSE(gauge.crowded(t, read));
    }
    crowded_window();
    REQUIRE(gauge.crowded(CrowdingGauge::clock::now(), read));
}

}  // namespace

TEST_CASE("session_wait_policy: no spinning while crowded, unless confined to one CPU") {
    const WaitPolicy configured = WaitPolicy::from_us(50, 200);
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    REQUIRE(::sched_getaffinity(0, sizeof allowed, &allowed) == 0);
    if (CPU_COUNT(&allowed) < 2) {
        WARN("needs two CPUs: a thread on one CPU is confined to it");
        return;
    }
    const AdaptiveSpin spin;
    std::atomic<uint32_t> my_field{0};
    std::atomic<uint32_t> peer_field{0};
    CrowdingGauge gauge(CrowdingGauge::RateCheck::Off);
    make_crowded(gauge);
    WaitPolicy unconfined, without_gauge, confined;
    int pinned = -1;
    std::thread free_thread([&] {
        SoleCpuHint hint;
        unconfined =
            session_wait_policy({hint, my_field, peer_field, &gauge}, false, spin, configured);
        without_gauge = session_wait_policy({hint, my_field, peer_field}, false, spin, configured);
    });
    free_thread.join();
    std::thread confined_thread([&] {
        cpu_set_t one;
        CPU_ZERO(&one);
        for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
            if (CPU_ISSET(cpu, &allowed)) {
                CPU_SET(cpu, &one);
                break;
            }
        }
        pinned = ::pthread_setaffinity_np(::pthread_self(), sizeof one, &one);
        SoleCpuHint hint;
        confined =
            session_wait_policy({hint, my_field, peer_field, &gauge}, false, spin, configured);
    });
    confined_thread.join();
    REQUIRE(pinned == 0);
    CHECK(unconfined.total() == WaitPolicy::none().total());
    CHECK(without_gauge.total() == configured.total());
    CHECK(confined.total() == configured.total());
}
