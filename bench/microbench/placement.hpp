// Where the two benchmark processes run: pinned to two CPUs (default when there are at
// least two), pinned to one CPU, or left to the scheduler.
#pragma once

#include <string>

#include "bench/microbench/args.hpp"

namespace l5pg::microbench {

struct Placement {
    bool pinned = false;
    int parent_cpu = -1;  // client / writer
    int child_cpu = -1;   // echo server / reader
    int allowed_cpus = 0;

    // Short tag for the CSV: "pinned:0/1", "pinned:0/0" or "default".
    [[nodiscard]] std::string label() const;
    // One sentence for humans, including whether the two CPUs share a core.
    [[nodiscard]] std::string describe() const;
};

// Resolves --cpus / --no-pin against the CPUs this process may run on; throws
// BenchError for a CPU outside the affinity mask.
[[nodiscard]] Placement choose_placement(const Options& options);

// "model name" from /proc/cpuinfo, or "unknown CPU".
[[nodiscard]] std::string cpu_model();

// sched_setaffinity of the calling process to one CPU; throws BenchError.
void pin_to_cpu(int cpu);

}  // namespace l5pg::microbench
