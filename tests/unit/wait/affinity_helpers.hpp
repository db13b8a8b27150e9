// CPU affinity helpers for the tests of placement hints and CPU following.
#pragma once

#include <sched.h>

#include <thread>

#include <catch2/catch.hpp>

namespace l5pg::test {

// Runs `fn` on a fresh thread whose affinity is `set` (the test's own thread stays as is).
template <class Fn>
void on_thread_with_affinity(const cpu_set_t& set, Fn fn) {
    std::thread t([&] {
        REQUIRE(::sched_setaffinity(0, sizeof set, &set) == 0);
        fn();
    });
    t.join();
}

inline cpu_set_t allowed_cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    REQUIRE(::sched_getaffinity(0, sizeof set, &set) == 0);
    return set;
}

inline int first_cpu(const cpu_set_t& set) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
        if (CPU_ISSET(cpu, &set))
            return cpu;
    return -1;
}

inline cpu_set_t only(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return set;
}

}  // namespace l5pg::test
