#include "bench/microbench/placement.hpp"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <vector>

#include <fmt/core.h>

#include "bench/microbench/posix.hpp"

namespace l5pg::microbench {
namespace {

std::vector<int> allowed_cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(0, sizeof set, &set) != 0)
        throw_errno("sched_getaffinity");
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set))
            cpus.push_back(c);
    return cpus;
}

std::string read_topology(int cpu, const char* file) {
    std::ifstream in(fmt::format("/sys/devices/system/cpu/cpu{}/topology/{}", cpu, file));
    std::string value;
    std::getline(in, value);
    return value;
}

// Both CPUs are hardware threads of one core (unknown topology counts as "no").
bool smt_siblings(int a, int b) {
    const std::string core_a = read_topology(a, "core_id");
    const std::string pkg_a = read_topology(a, "physical_package_id");
    return !core_a.empty() && core_a == read_topology(b, "core_id") &&
           pkg_a == read_topology(b, "physical_package_id");
}

}  // namespace

std::string Placement::label() const {
    return pinned ? fmt::format("pinned:{}/{}", parent_cpu, child_cpu) : "default";
}

std::string Placement::describe() const {
    if (!pinned)
        return fmt::format(
            "not pinned: the scheduler places both processes on any of {} allowed CPUs",
            allowed_cpus);
    std::string where;
    if (parent_cpu == child_cpu)
        where = "the same CPU (every hand-off needs a context switch)";
    else if (smt_siblings(parent_cpu, child_cpu))
        where = "two hardware threads of one core (SMT siblings)";
    else
        where = "two different cores";
    return fmt::format(
        "parent (client/writer) pinned to CPU {}, child (server/reader) to CPU {}: {}", parent_cpu,
        child_cpu, where);
}

Placement choose_placement(const Options& options) {
    const std::vector<int> cpus = allowed_cpus();
    Placement p;
    p.allowed_cpus = static_cast<int>(cpus.size());
    if (options.no_pin)
        return p;
    p.pinned = true;
    if (options.cpus) {
        for (int c : {options.cpus->first, options.cpus->second})
            if (std::find(cpus.begin(), cpus.end(), c) == cpus.end())
                throw BenchError(
                    fmt::format("--cpus: CPU {} is not in this process's affinity mask", c));
        p.parent_cpu = options.cpus->first;
        p.child_cpu = options.cpus->second;
        return p;
    }
    p.parent_cpu = cpus.front();
    p.child_cpu = cpus.front();
    // Prefer a CPU on another core; else any other CPU; with one CPU, share it.
    for (size_t i = 1; i < cpus.size(); ++i) {
        if (!smt_siblings(cpus.front(), cpus[i])) {
            p.child_cpu = cpus[i];
            return p;
        }
    }
    if (cpus.size() > 1)
        p.child_cpu = cpus[1];
    return p;
}

std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.starts_with("model name")) {
            const size_t colon = line.find(':');
            if (colon != std::string::npos && colon + 2 <= line.size())
                return line.substr(colon + 2);
        }
    }
    return "unknown CPU";
}

void pin_to_cpu(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (::sched_setaffinity(0, sizeof set, &set) != 0)
        throw_errno(fmt::format("sched_setaffinity to CPU {}", cpu));
}

}  // namespace l5pg::microbench
