// daemon/log_limiter.hpp: a burst per interval, then a count of what was suppressed.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "daemon/log_limiter.hpp"

using l5pg::daemon::LogLimiter;
using namespace std::chrono_literals;

TEST_CASE("log limiter: a burst per interval, then the suppressed count on the next line") {
    LogLimiter limiter(5s, 3);
    const auto t0 = LogLimiter::clock::time_point{} + 1h;
    CHECK(limiter.admit(t0) == 0u);
    CHECK(limiter.admit(t0 + 1ms) == 0u);
    CHECK(limiter.admit(t0 + 2ms) == 0u);
    for (int i = 0; i < 1000; ++i)
        CHECK_FALSE(limiter.admit(t0 + 3ms).has_value());
    CHECK_FALSE(limiter.admit(t0 + 4999ms).has_value());
    CHECK(limiter.admit(t0 + 5s) == 1001u);  // a new window: says what was not logged
    CHECK(limiter.admit(t0 + 5s + 1ms) == 0u);
}

TEST_CASE("log limiter: what no later line reported is taken once the interval is over") {
    LogLimiter limiter(5s, 2);
    const auto t0 = LogLimiter::clock::time_point{} + 1h;
    CHECK_FALSE(limiter.take_unreported(t0).has_value());  // nothing yet
    CHECK(limiter.admit(t0) == 0u);
    CHECK(limiter.admit(t0) == 0u);
    for (int i = 0; i < 7; ++i)
        CHECK_FALSE(limiter.admit(t0 + 1s).has_value());
    CHECK_FALSE(limiter.take_unreported(t0 + 4999ms).has_value());  // the interval runs on
    CHECK(limiter.take_unreported(t0 + 5s)->count == 7u);
    CHECK_FALSE(limiter.take_unreported(t0 + 6s).has_value());  // reported once
    CHECK(limiter.admit(t0 + 6s) == 0u);                        // and not again by a line
}

TEST_CASE("log limiter: the unreported count comes with the highest level suppressed") {
    LogLimiter limiter(500ms, 1);                     // the four lines come within it
    limiter.log(spdlog::level::info, "first {}", 1);  // logged
    limiter.log(spdlog::level::info, "second {}", 2);
    limiter.log(spdlog::level::warn, "third {}", 3);
    limiter.log(spdlog::level::info, "fourth {}", 4);
    std::this_thread::sleep_for(600ms);  // the interval is over
    const auto tail = limiter.take_unreported(LogLimiter::clock::now());
    REQUIRE(tail.has_value());
    CHECK(tail->count == 3u);
    CHECK(tail->level == spdlog::level::warn);
}

TEST_CASE("log limiter: shared by threads, every event is logged or counted exactly once") {
    LogLimiter limiter(1h, 10);
    constexpr int kThreads = 4;
    constexpr int kEach = 10000;
    std::vector<std::thread> threads;
    std::atomic<uint64_t> admitted{0};
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&] {
            for (int i = 0; i < kEach; ++i)
                if (limiter.admit(LogLimiter::clock::now()))
                    admitted.fetch_add(1);
        });
    for (auto& t : threads)
        t.join();
    CHECK(admitted.load() == 10u);
    // The next window's first line reports all the others.
    CHECK(limiter.admit(LogLimiter::clock::now() + 2h) == uint64_t{kThreads * kEach - 10});
}
