// CpuFollower (cpu_follower.hpp): a thread moves itself onto one CPU and back, for real.
#include <sched.h>

#include <cerrno>

#include <catch2/catch.hpp>

#include "tests/unit/wait/affinity_helpers.hpp"
#include "transport/wait/cpu_follower.hpp"

using namespace l5pg::wait;
using namespace l5pg::test;

namespace {

bool same_set(const cpu_set_t& a, const cpu_set_t& b) {
    return CPU_EQUAL(&a, &b) != 0;
}

int last_cpu(const cpu_set_t& set) {
    int last = -1;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
        if (CPU_ISSET(cpu, &set))
            last = cpu;
    return last;
}

}  // namespace

TEST_CASE("CpuFollower moves the thread onto the CPU it follows, release gives its mask back") {
    const cpu_set_t all = allowed_cpus();
    on_thread_with_affinity(all, [&] {
        CpuFollower follower;
        const int cpu = last_cpu(all);
        errno = EDOM;
        follower.follow(uint32_t(cpu) + 1);
        CHECK(errno == EDOM);
        REQUIRE(follower.following());
        CHECK(same_set(allowed_cpus(), only(cpu)));
        CHECK(::sched_getcpu() == cpu);  // sched_setaffinity moved us before it returned
        if (CPU_COUNT(&all) > 1) {
            const int other = first_cpu(all);
            follower.follow(uint32_t(other) + 1);  // the client moved: so do we
            CHECK(same_set(allowed_cpus(), only(other)));
        }
        follower.release();
        CHECK_FALSE(follower.following());
        CHECK(same_set(allowed_cpus(), all));
        follower.release();  // a no-op now
        CHECK(same_set(allowed_cpus(), all));
    });
}

TEST_CASE("CpuFollower ignores 'unknown', absurd CPUs and CPUs outside the thread's mask") {
    const cpu_set_t all = allowed_cpus();
    const int cpu = first_cpu(all);
    on_thread_with_affinity(only(cpu), [&] {
        CpuFollower follower;
        follower.follow(0);
        follower.follow(CPU_SETSIZE + 1);
        follower.follow(uint32_t(cpu) + 2);  // the next CPU: not ours to use
        CHECK_FALSE(follower.following());
        CHECK(same_set(allowed_cpus(), only(cpu)));
    });
}
