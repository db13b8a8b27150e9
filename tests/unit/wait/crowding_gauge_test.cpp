// CrowdingGauge: the contention signal of the spin phases (crowding_gauge.hpp).
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "transport/wait/crowding_gauge.hpp"

using namespace l5pg::wait;
using namespace std::chrono_literals;
using clock_type = CrowdingGauge::clock;

namespace {

// A scripted reader: the times the next read returns, and how often it was called.
struct FakeTimes {
    std::optional<SchedTimes> next = SchedTimes{};
    int reads = 0;
    std::optional<SchedTimes> operator()() {
        ++reads;
        return next;
    }
    // Since the last reading the thread ran `run`, waited `delay` for a CPU, and the
    // host's CPUs were idle `idle` in all.
    void advance(std::chrono::nanoseconds run, std::chrono::nanoseconds delay,
                 std::chrono::nanoseconds idle = 0ns) {
        next->run_ns += static_cast<uint64_t>(run.count());
        next->delay_ns += static_cast<uint64_t>(delay.count());
        next->host_idle_ns += static_cast<uint64_t>(idle.count());
    }
};

constexpr auto kWindow = CrowdingGauge::kWindow;

// Calls crowded() `waits` times spread over `length` after `t`, the last one at t + length
// (one call per wait, as the shim does); returns what the last call said and advances t.
bool waits_over(CrowdingGauge& gauge, FakeTimes& times, clock_type::time_point& t, int waits,
                clock_type::duration length) {
    bool last = false;
    for (int i = 0; i < waits; ++i)
        last = gauge.crowded(t + length * (i + 1) / waits, times);
    t += length;
    return last;
}

// Runs until this thread has had `d` of CPU time, however many other threads want the CPUs
// (ctest runs tests side by side).
void busy_for(std::chrono::milliseconds d) {
    auto cpu_now = [] {
        timespec ts{};
        ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
    };
    const auto end = cpu_now() + d;
    while (cpu_now() < end) {
    }
}

}  // namespace

TEST_CASE("parse_schedstat reads run and delay, refuses anything else") {
    SchedTimes t;
    const char ok[] = "123456 789 42\n";
    REQUIRE(parse_schedstat(ok, std::strlen(ok), t));
    CHECK(t.run_ns == 123456);
    CHECK(t.delay_ns == 789);
    for (const char* bad : {"", "12", "12 ", "12 34", "x 1 2\n", "1 y 2\n", "-1 2 3\n"})
        CHECK_FALSE(parse_schedstat(bad, std::strlen(bad), t));
}

TEST_CASE("parse_uptime_idle reads the second field, refuses anything else") {
    SchedTimes t;
    const char ok[] = "17674.77 13979.23\n";
    REQUIRE(parse_uptime_idle(ok, std::strlen(ok), t));
    CHECK(t.host_idle_ns == 13'979'230'000'000ULL);
    for (const char* bad : {"", "17674.77", "17674.77 ", "1.0 x.23\n", "1.0 12\n", "1.0 12.3\n",
                            "1.0 12.345\n", "1.0 -1.00\n"})
        CHECK_FALSE(parse_uptime_idle(bad, std::strlen(bad), t));
}

TEST_CASE("read_sched_times: this thread's CPU time grows, errno is kept") {
    const auto before = read_sched_times();
    REQUIRE(before);
    busy_for(20ms);
    errno = EDOM;
    const auto after = read_sched_times();
    CHECK(errno == EDOM);
    REQUIRE(after);
    CHECK(after->run_ns - before->run_ns >= 10'000'000);
    CHECK(after->delay_ns >= before->delay_ns);
    // Not that the host's idle time grows: the kernel's idle counters are not guaranteed
    // never to step back (psutil's issue 2172 shows /proc/stat's doing so).
    CHECK(after->host_idle_ns > 0);
}

TEST_CASE("CrowdingGauge judges windows of spinning, backs off while crowded") {
    CrowdingGauge gauge(CrowdingGauge::RateCheck::Off);
    FakeTimes times;
    auto t = clock_type::time_point{} + 1s;

    SECTION("a thread that runs without waiting for a CPU always spins") {
        for (int i = 0; i < 10; ++i) {
            CHECK_FALSE(gauge.crowded(t, times));
            times.advance(kWindow, kWindow / 20);
            t += kWindow;
        }
        CHECK(times.reads == 10);  // each call here ends a window
    }
    SECTION("within a window nothing is read") {
        CHECK_FALSE(gauge.crowded(t, times));
        CHECK_FALSE(gauge.crowded(t + kWindow / 2, times));
        CHECK(times.reads == 1);
    }
    SECTION("more delay than half the run time, no CPU idle: block, twice as long each time") {
        CHECK_FALSE(gauge.crowded(t, times));  // opens a window
        CHECK_FALSE(gauge.crowded_lately());
        times.advance(kWindow / 2, kWindow / 2);
        t += kWindow;
        CHECK(gauge.crowded(t, times));
        const int reads = times.reads;
        CHECK(gauge.crowded(t + CrowdingGauge::kMinBackoff - 1ns, times));
        CHECK(times.reads == reads);  // backing off reads nothing
        t += CrowdingGauge::kMinBackoff;
        CHECK_FALSE(gauge.crowded(t, times));  // tries spinning again for one window
        times.advance(kWindow / 2, kWindow / 2);
        t += kWindow;
        CHECK(gauge.crowded(t, times));
        CHECK(gauge.crowded(t + 2 * CrowdingGauge::kMinBackoff - 1ns, times));
        t += 2 * CrowdingGauge::kMinBackoff;
        CHECK_FALSE(gauge.crowded(t, times));
        SECTION("an uncrowded window ends the doubling") {
            CHECK(gauge.crowded_lately());  // through the back-offs and the windows between
            times.advance(kWindow, 0ns);
            t += kWindow;
            CHECK_FALSE(gauge.crowded(t, times));
            CHECK_FALSE(gauge.crowded_lately());
            times.advance(kWindow / 2, kWindow / 2);
            t += kWindow;
            CHECK(gauge.crowded(t, times));
            CHECK_FALSE(gauge.crowded(t + CrowdingGauge::kMinBackoff, times));
        }
        SECTION("the back-off stops doubling at kMaxBackoff") {
            for (int i = 0; i < 10; ++i) {
                times.advance(kWindow / 2, kWindow / 2);
                t += kWindow;
                REQUIRE(gauge.crowded(t, times));
                t += CrowdingGauge::kMaxBackoff;
                REQUIRE_FALSE(gauge.crowded(t, times));
            }
        }
    }
    SECTION("a CPU idle for a quarter of the window: crowded here, but there is room elsewhere") {
        CHECK_FALSE(gauge.crowded(t, times));
        times.advance(kWindow / 2, kWindow / 2, kWindow / 4);
        t += kWindow;
        CHECK_FALSE(gauge.crowded(t, times));
        times.advance(kWindow / 2, kWindow / 2, kWindow / 4 - 1ns);
        t += kWindow;
        CHECK(gauge.crowded(t, times));
    }
    SECTION("a window in which the thread hardly ran tells nothing") {
        CHECK_FALSE(gauge.crowded(t, times));
        times.advance(std::chrono::nanoseconds(CrowdingGauge::kMinRunNs - 1), kWindow);
        t += kWindow;
        CHECK_FALSE(gauge.crowded(t, times));
    }
    SECTION("without /proc it never blocks, and stops trying") {
        times.next.reset();
        for (int i = 0; i < 5; ++i) {
            CHECK_FALSE(gauge.crowded(t, times));
            t += kWindow;
        }
        CHECK(times.reads == 1);
    }
}

TEST_CASE("CrowdingGauge with RateCheck::On keeps blocking only while it serves more waits") {
    CrowdingGauge gauge(CrowdingGauge::RateCheck::On);
    FakeTimes times;
    auto t = clock_type::time_point{} + 1s;
    CHECK_FALSE(gauge.crowded(t, times));
    times.advance(kWindow / 2, kWindow / 2);
    // A crowded window of 100 waits, then a back-off (kMinBackoff, as long as the window).
    CHECK(waits_over(gauge, times, t, 100, kWindow));

    SECTION("blocking served more waits per second: crowded windows keep blocking") {
        CHECK_FALSE(waits_over(gauge, times, t, 300, CrowdingGauge::kMinBackoff));  // ends it
        times.advance(kWindow / 2, kWindow / 2);
        CHECK(waits_over(gauge, times, t, 100, kWindow));
    }
    SECTION("blocking served fewer: spin for a respite of kMinRespite, then judge again") {
        CHECK_FALSE(waits_over(gauge, times, t, 30, CrowdingGauge::kMinBackoff));  // ends it
        times.advance(kWindow / 2, kWindow / 2);
        CHECK_FALSE(waits_over(gauge, times, t, 100, kWindow));  // crowded, not acted upon
        t += CrowdingGauge::kMinRespite;
        CHECK_FALSE(gauge.crowded(t, times));  // the respite is over: a window opens
        times.advance(kWindow / 2, kWindow / 2);
        CHECK(waits_over(gauge, times, t, 100, kWindow));
    }
}

TEST_CASE("CrowdingGauge: a spinner sharing its CPU while every other CPU is busy is crowded") {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    REQUIRE(::sched_getaffinity(0, sizeof allowed, &allowed) == 0);
    std::vector<int> cpus;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
        if (CPU_ISSET(cpu, &allowed))
            cpus.push_back(cpu);
    std::atomic<bool> stop{false};
    std::atomic<int> crowded_seen{0};
    // One spinner per CPU we may use, so that no CPU is idle, and a second one on the first,
    // which judges: it waits for its CPU about as long as it runs.
    auto spinner = [&](int cpu, bool judge) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        if (::pthread_setaffinity_np(::pthread_self(), sizeof one, &one) != 0)
            return;
        CrowdingGauge gauge(CrowdingGauge::RateCheck::Off);
        const auto end = clock_type::now() + 2s;
        while (clock_type::now() < end && !stop.load(std::memory_order_relaxed)) {
            if (judge && gauge.crowded(clock_type::now(), read_sched_times)) {
                crowded_seen.fetch_add(1, std::memory_order_relaxed);
                stop.store(true, std::memory_order_relaxed);
            }
        }
    };
    std::vector<std::thread> threads;
    threads.emplace_back(spinner, cpus.front(), true);
    for (int cpu : cpus)
        threads.emplace_back(spinner, cpu, false);
    for (std::thread& thread : threads)
        thread.join();
    CHECK(crowded_seen.load() == 1);
}
