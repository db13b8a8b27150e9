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
    SECTION("unnamed waits always ring") {
        CHECK(rung.must_ring(kUnnamedWait));
        CHECK(rung.must_ring(kUnnamedWait));
    }
    SECTION("a named wait rings once") {
        CHECK(rung.must_ring(42));
        CHECK_FALSE(rung.must_ring(42));
        CHECK(rung.must_ring(43));  // the worker's next block
        CHECK_FALSE(rung.must_ring(42));
    }
    SECTION("several workers' blocks at once") {
        for (uint64_t w = 1; w <= 8; ++w)
            CHECK(rung.must_ring(w));
        for (uint64_t w = 1; w <= 8; ++w)
            CHECK_FALSE(rung.must_ring(w));
    }
    SECTION("an old wait overwritten rings again: a spare doorbell, never a lost one") {
        CHECK(rung.must_ring(1));
        for (uint64_t w = 2; w <= 9; ++w)
            CHECK(rung.must_ring(w));
        CHECK(rung.must_ring(1));
    }
    SECTION("after forget() (a forked child) every wait rings again") {
        CHECK(rung.must_ring(7));
        rung.forget();
        CHECK(rung.must_ring(7));
    }
}

// The property a skipped doorbell relies on: of the threads that take flags armed under one
// name, at least one rings. Run under TSan as well (wait_test is one of TSAN_UNIT).
TEST_CASE("RungWaits: threads racing for the same waits, each wait rung", "[wait][doorbell]") {
    RungWaits rung;
    constexpr int kThreads = 4;
    constexpr uint64_t kWaits = 5000;
    std::vector<std::atomic<int>> rings(kWaits + 1);
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
                if (rung.must_ring(w))
                    rings[w].fetch_add(1, std::memory_order_relaxed);
                if (w < kWaits)
                    current.compare_exchange_strong(seen, w + 1);
                seen = w;
            }
        });
    for (std::thread& t : threads)
        t.join();
    int missed = 0;
    for (uint64_t w = 1; w <= kWaits; ++w)
        missed += rings[w].load() == 0 ? 1 : 0;
    CHECK(missed == 0);
}
