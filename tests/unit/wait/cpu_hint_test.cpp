#include <sched.h>

#include <atomic>
#include <cerrno>
#include <thread>

#include <catch2/catch.hpp>

#include "tests/unit/wait/affinity_helpers.hpp"
#include "transport/wait/cpu_hint.hpp"

using namespace l5pg::wait;
using namespace l5pg::test;

namespace {
SoleCpuHint::clock::time_point at_ns(int64_t ns) {
    return SoleCpuHint::clock::time_point(std::chrono::nanoseconds(ns));
}
}  // namespace

TEST_CASE("sole_cpu_of_this_thread names the one CPU a thread is confined to") {
    const cpu_set_t all = allowed_cpus();
    const int cpu = first_cpu(all);
    on_thread_with_affinity(only(cpu),
                            [&] { CHECK(sole_cpu_of_this_thread() == uint32_t(cpu) + 1); });
    if (CPU_COUNT(&all) > 1)
        on_thread_with_affinity(all, [] { CHECK(sole_cpu_of_this_thread() == 0); });
}

TEST_CASE("SoleCpuHint re-reads the affinity only once its reading is old") {
    const cpu_set_t all = allowed_cpus();
    if (CPU_COUNT(&all) < 2) {
        WARN("SKIPPED: needs two CPUs to change the answer");
        return;
    }
    const int cpu = first_cpu(all);
    on_thread_with_affinity(only(cpu), [&] {
        SoleCpuHint hint;
        const uint32_t confined = uint32_t(cpu) + 1;
        CHECK(hint.current(at_ns(1000)) == confined);
        REQUIRE(::sched_setaffinity(0, sizeof all, &all) == 0);
        CHECK(hint.current(at_ns(1000 + SoleCpuHint::kRefreshNs - 1)) == confined);  // cached
        CHECK(hint.current(at_ns(1000 + SoleCpuHint::kRefreshNs)) == 0);             // re-read
    });
}

TEST_CASE("publish_and_compare writes our hint and matches only the same CPU") {
    std::atomic<uint32_t> mine{0}, peers{0};
    CHECK_FALSE(publish_and_compare(mine, peers, 3));
    CHECK(mine.load() == 3);
    peers.store(3);
    CHECK(publish_and_compare(mine, peers, 3));
    peers.store(4);
    CHECK_FALSE(publish_and_compare(mine, peers, 3));
    // Not confined ("0") never matches, not even a peer that says 0 too.
    peers.store(0);
    CHECK_FALSE(publish_and_compare(mine, peers, 0));
    CHECK(mine.load() == 0);
}

TEST_CASE("publish_current_cpu writes the CPU the thread runs on, + 1, and keeps errno") {
    const int cpu = first_cpu(allowed_cpus());
    on_thread_with_affinity(only(cpu), [&] {
        std::atomic<uint32_t> field{0};
        errno = EDOM;
        publish_current_cpu(field);
        CHECK(errno == EDOM);
        CHECK(field.load() == uint32_t(cpu) + 1);
    });
}
