// l5pg-microbench: transport microbenchmarks for l5pg (see args.cpp for the usage).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "bench/microbench/args.hpp"
#include "bench/microbench/bandwidth.hpp"
#include "bench/microbench/pingpong.hpp"
#include "bench/microbench/placement.hpp"
#include "bench/microbench/posix.hpp"
#include "bench/microbench/results.hpp"

using namespace l5pg::microbench;

namespace {

void print_header(const Options& o, const Placement& p, const Timing& t) {
    fmt::print("l5pg-microbench: {} run(s) per cell, {:.3g} s each after {:.3g} s warm-up{}\n",
               o.repeat, t.seconds, t.warmup_seconds, o.quick ? " (--quick)" : "");
    fmt::print("machine: {}, {} CPUs online, {} allowed\n", cpu_model(),
               ::sysconf(_SC_NPROCESSORS_ONLN), p.allowed_cpus);
    fmt::print("placement: {}\n", p.describe());
    fmt::print("SHM adaptive wait budget: spin {} us, then sched_yield {} us, then doorbell\n",
               o.spin_us, o.yield_us);
}

// Repeats are interleaved (run 1 of every cell, then run 2, ...) so that slow drift,
// e.g. the hypervisor moving a vCPU, affects every cell alike.
void run_pingpong_cells(const Options& o, const Placement& p, const Timing& t,
                        const l5pg::wait::WaitPolicy& budget, Results& results) {
    std::vector<PingPongCell> cells;
    for (const std::string& transport : o.transports) {
        const bool sized = transport_has_msg_size(transport);
        for (size_t msg : sized ? o.msg_sizes : std::vector{kCacheLineMessage})
            cells.push_back(
                {transport, msg, transport_uses_ring(transport) ? o.pingpong_ring : 0, budget});
    }
    for (int run = 1; run <= o.repeat; ++run) {
        for (const PingPongCell& cell : cells) {
            Sample s{"pingpong", cell.transport,     cell.msg_bytes, cell.ring_bytes, run,
                     {},         "round_trips_per_s"};
            try {
                const PingPongRun r = run_pingpong(cell, t, p);
                s.value = r.round_trips_per_second;
                fmt::print(stderr, "[pingpong] run {}/{} {:<9} {:>6}: {:>8} RT/s, {:.2f} us/RT",
                           run, o.repeat, cell.transport, format_bytes(cell.msg_bytes),
                           format_rate(r.round_trips_per_second), 1e6 / r.round_trips_per_second);
                if (cell.transport == "shm" || cell.transport == "shm-block")
                    fmt::print(stderr, " (client blocked {:.3f}x, doorbells {:.3f}x per RT)",
                               static_cast<double>(r.polls) / r.round_trips,
                               static_cast<double>(r.doorbells) / r.round_trips);
                fmt::print(stderr, "\n");
            } catch (const std::exception& e) {
                fmt::print(stderr, "[pingpong] run {} {} {}: FAILED: {}\n", run, cell.transport,
                           format_bytes(cell.msg_bytes), e.what());
            }
            results.add(std::move(s));
        }
    }
}

void run_memcpy_cell(const char* name, size_t bytes, int run, const Options& o, const Timing& t,
                     Results& results) {
    Sample s{"memcpy", name, bytes, 0, run, {}, "GB_per_s"};
    try {
        s.value = run_memcpy(bytes, t).gb_per_second;
        fmt::print(stderr, "[memcpy] run {}/{} {:<6} {:>8}: {:.2f} GB/s\n", run, o.repeat, name,
                   format_bytes(bytes), *s.value);
    } catch (const std::exception& e) {
        fmt::print(stderr, "[memcpy] run {} {}: FAILED: {}\n", run, name, e.what());
    }
    results.add(std::move(s));
}

void run_bandwidth_cells(const Options& o, const Placement& p, const Timing& t,
                         const l5pg::wait::WaitPolicy& budget, Results& results) {
    for (int run = 1; run <= o.repeat; ++run) {
        run_memcpy_cell("dram", memcpy_dram_buffer_bytes(), run, o, t, results);
        run_memcpy_cell("cached", memcpy_cached_buffer_bytes(), run, o, t, results);
        for (size_t ring : o.ring_sizes) {
            for (size_t chunk : o.chunk_sizes) {
                Sample s{"bandwidth", "shm", chunk, ring, run, {}, "GB_per_s"};
                try {
                    const BandwidthRun r = run_shm_bandwidth(chunk, ring, budget, t, p);
                    s.value = r.gb_per_second;
                    fmt::print(stderr,
                               "[bandwidth] run {}/{} ring {:>7} chunk {:>7}: {:6.2f} GB/s ({} "
                               "chunks, {} compared in full; blocked: writer {}, reader {})\n",
                               run, o.repeat, format_bytes(ring), format_bytes(chunk),
                               r.gb_per_second, r.chunks_total, r.chunks_verified, r.writer_polls,
                               r.reader_polls);
                } catch (const std::exception& e) {
                    fmt::print(stderr, "[bandwidth] run {} ring {} chunk {}: FAILED: {}\n", run,
                               format_bytes(ring), format_bytes(chunk), e.what());
                }
                results.add(std::move(s));
            }
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse_args(argc, argv);
    ::signal(SIGPIPE, SIG_IGN);  // a dead peer shows up as EPIPE, not as our death
    try {
        const Placement p = choose_placement(o);
        if (p.pinned)
            pin_to_cpu(p.parent_cpu);
        const Timing t{o.warmup_seconds(), o.seconds};
        const auto budget = l5pg::wait::WaitPolicy::from_us(o.spin_us, o.yield_us);
        print_header(o, p, t);
        std::fflush(stdout);

        Results results(p.label());
        if (o.run_pingpong)
            run_pingpong_cells(o, p, t, budget, results);
        if (o.run_bandwidth)
            run_bandwidth_cells(o, p, t, budget, results);

        if (o.run_pingpong)
            results.print_pingpong(o.transports, o.msg_sizes, o.pingpong_ring);
        if (o.run_bandwidth)
            results.print_bandwidth(o.chunk_sizes, o.ring_sizes, memcpy_dram_buffer_bytes(),
                                    memcpy_cached_buffer_bytes());
        if (!o.csv_path.empty()) {
            results.write_csv(o.csv_path);
            fmt::print("\nCSV: {}\n", o.csv_path);
        }
        if (results.any_failed()) {
            fmt::print(stderr, "l5pg-microbench: some runs FAILED (see above)\n");
            return 1;
        }
        return 0;
    } catch (const std::exception& e) {
        fmt::print(stderr, "l5pg-microbench: {}\n", e.what());
        return 1;
    }
}
