// session_wait_policy(): the placement rule the shim's channel and the microbenchmark share.
#include <catch2/catch.hpp>

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdint>
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
