#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "transport/wait/rung_waits.hpp"

using l5pg::wait::kUnnamedWait;
using l5pg::wait::RungWaits;

TEST_CASE("RungWaits: one doorbell per named wait of a worker", "[wait][doorbell]") {
    RungWaits rung;
    SECTION("unnamed waits never count as rung") {
        rung.remember(kUnnamedWait);
        CHECK_FALSE(rung.rung(kUnnamedWait));
    }
    SECTION("a named wait counts as rung once its doorbell went out") {
        CHECK_FALSE(rung.rung(42));
        rung.remember(42);
        CHECK(rung.rung(42));
        CHECK_FALSE(rung.rung(43));  // the worker's next block
    }
    SECTION("several workers' blocks at once") {
        for (uint64_t w = 1; w <= 8; ++w)
            rung.remember(w);
        for (uint64_t w = 1; w <= 8; ++w)
            CHECK(rung.rung(w));
    }
    SECTION("an old wait overwritten rings again: a spare doorbell, never a lost one") {
        for (uint64_t w = 1; w <= 9; ++w)
            rung.remember(w);
        CHECK_FALSE(rung.rung(1));
        CHECK(rung.rung(9));
    }
    SECTION("after forget() (a forked child) every wait rings again") {
        rung.remember(7);
        rung.forget();
        CHECK_FALSE(rung.rung(7));
    }
}

// What a skipped doorbell relies on: a thread that finds a name does so only after another
// thread's doorbell for it went out. Threads race through a sequence of waits as the shim's
// writers do (check, ring, remember); every skip must come after a ring of the same wait.
// Run under TSan as well (wait_test is one of TSAN_UNIT).
TEST_CASE("RungWaits: threads racing for the same waits skip only rung ones", "[wait][doorbell]") {
    RungWaits rung;
    constexpr int kThreads = 4;
    constexpr uint64_t kWaits = 5000;
    std::vector<std::atomic<int>> rings(kWaits + 1);
    std::atomic<int> early_skips{0};
    std::atomic<uint64_t> current{1};  // the worker's current block
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&] {
            for (uint64_t seen = 0; seen < kWaits;) {
                const uint64_t w = current.load(std::memory_order_acquire);
                if (w == seen) {
                    std::this_thread::yield();  // 4 threads on as few as 2 CPUs
                    continue;
                }
                seen = w;
                if (!rung.rung(w)) {
                    rings[w].fetch_add(1, std::memory_order_release);  // the doorbell
                    rung.remember(w);
                } else if (rings[w].load(std::memory_order_acquire) == 0) {
                    early_skips.fetch_add(1, std::memory_order_relaxed);
                }
                uint64_t expected = w;
                if (w < kWaits)
                    current.compare_exchange_strong(expected, w + 1);
            }
        });
    for (std::thread& t : threads)
        t.join();
    int missed = 0;
    for (uint64_t w = 1; w <= kWaits; ++w)
        missed += rings[w].load() == 0 ? 1 : 0;
    CHECK(missed == 0);
    CHECK(early_skips.load() == 0);
}
