// Command line of l5pg-microbench.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "transport/wait/defaults.hpp"

namespace l5pg::microbench {

struct Options {
    double seconds = 1.0;                     // timed duration of one run of one cell
    int repeat = 3;                           // runs per cell; median and min/max are reported
    bool quick = false;                       // fewer cells and (unless --seconds) 0.2 s per run
    std::string csv_path;                     // empty: no CSV
    std::optional<std::pair<int, int>> cpus;  // --cpus a,b: parent on a, child on b
    bool no_pin = false;                      // --no-pin: leave placement to the scheduler
    bool run_pingpong = true;
    bool run_bandwidth = true;
    std::vector<std::string> transports;  // ping-pong transports, in order
    std::vector<size_t> msg_sizes{64, 100};
    size_t pingpong_ring = size_t{1} << 20;   // per direction, the shim's default
    std::vector<size_t> chunk_sizes;          // bandwidth
    std::vector<size_t> ring_sizes;           // bandwidth
    unsigned spin_us = wait::kDefaultSpinUs;  // adaptive wait budget (the channel's defaults)
    unsigned yield_us = wait::kDefaultYieldUs;

    // Warm-up before each timed run.
    [[nodiscard]] double warmup_seconds() const noexcept;
};

// Parses argv; prints usage and exits on --help (0) or on an error (2).
[[nodiscard]] Options parse_args(int argc, char** argv);

// "64 KiB", "1 MiB", "100 B".
[[nodiscard]] std::string format_bytes(size_t bytes);

}  // namespace l5pg::microbench
