#include "bench/microbench/results.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>

#include <fmt/core.h>

#include "bench/microbench/args.hpp"
#include "bench/microbench/pingpong.hpp"
#include "bench/microbench/posix.hpp"

namespace l5pg::microbench {
namespace {

struct FileCloser {
    void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};

double median_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

std::string format_rate(double r) {
    if (r >= 1e6)
        return fmt::format("{:.2f}M", r / 1e6);
    if (r >= 1e3)
        return fmt::format("{:.1f}k", r / 1e3);
    return fmt::format("{:.0f}", r);
}

bool Results::any_failed() const {
    return std::any_of(samples_.begin(), samples_.end(),
                       [](const Sample& s) { return !s.value.has_value(); });
}

std::optional<Summary> Results::summary(const std::string& kind, const std::string& transport,
                                        size_t msg_bytes, size_t ring_bytes) const {
    std::vector<double> values;
    Summary s;
    for (const Sample& x : samples_) {
        if (x.kind != kind || x.transport != transport || x.msg_bytes != msg_bytes ||
            x.ring_bytes != ring_bytes)
            continue;
        if (x.value)
            values.push_back(*x.value);
        else
            ++s.failed;
    }
    if (values.empty())
        return std::nullopt;
    s.runs = values.size();
    s.median = median_of(values);
    s.min = *std::min_element(values.begin(), values.end());
    s.max = *std::max_element(values.begin(), values.end());
    return s;
}

void Results::write_csv(const std::string& path) const {
    std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "w"));
    if (!f)
        throw_errno("open " + path);
    fmt::print(f.get(), "kind,transport,msg_bytes,ring_bytes,run,value,unit,placement\n");
    for (const Sample& s : samples_)
        fmt::print(f.get(), "{},{},{},{},{},{},{},{}\n", s.kind, s.transport, s.msg_bytes,
                   s.ring_bytes, s.run, s.value ? fmt::format("{:.6g}", *s.value) : "",
                   s.value ? s.unit : "error", placement_);
    if (std::fflush(f.get()) != 0 || std::ferror(f.get()))
        throw_errno("write " + path);
}

void Results::print_pingpong(const std::vector<std::string>& transports,
                             const std::vector<size_t>& msg_sizes, size_t ring_bytes) const {
    const auto floor = summary("pingpong", "cacheline", kCacheLineMessage, 0);
    fmt::print(
        "\nPing-pong round trips per second (median of the runs, [min - max]);\n"
        "x floor = round-trip time / cache-line round-trip time. SHM rings: {} each way.\n",
        format_bytes(ring_bytes));
    fmt::print("{:<10} {:>6} {:>10} {:>21} {:>10} {:>9}\n", "transport", "msg", "RT/s",
               "[min - max]", "us/RT", "x floor");
    for (const std::string& t : transports) {
        const bool sized = transport_has_msg_size(t);
        const std::vector<size_t> sizes = sized ? msg_sizes : std::vector{kCacheLineMessage};
        for (size_t m : sizes) {
            const size_t ring = transport_uses_ring(t) ? ring_bytes : 0;
            const auto s = summary("pingpong", t, m, ring);
            if (!s) {
                fmt::print("{:<10} {:>6} {:>10}\n", t, format_bytes(m), "FAILED");
                continue;
            }
            const std::string ratio =
                floor ? fmt::format("{:.1f}", floor->median / s->median) : std::string("-");
            fmt::print("{:<10} {:>6} {:>10} {:>21} {:>10.2f} {:>9}{}\n", t, format_bytes(m),
                       format_rate(s->median),
                       fmt::format("[{} - {}]", format_rate(s->min), format_rate(s->max)),
                       1e6 / s->median, ratio,
                       s->failed ? fmt::format("  ({} failed)", s->failed) : "");
        }
    }
    print_ring_cost_bound(msg_sizes, ring_bytes);
}

// An SHM round trip pays the line transfers (at best the floor's) plus the ring code
// (shm-local), so floor time / (floor time + ring time) bounds its fraction of the floor.
void Results::print_ring_cost_bound(const std::vector<size_t>& msg_sizes, size_t ring_bytes) const {
    const auto floor = summary("pingpong", "cacheline", kCacheLineMessage, 0);
    if (!floor)
        return;
    for (size_t m : msg_sizes) {
        const auto local = summary("pingpong", "shm-local", m, ring_bytes);
        if (!local)
            continue;
        const double floor_us = 1e6 / floor->median;
        const double ring_us = 1e6 / local->median;
        fmt::print(
            "{}: ring code {:.3f} us per round trip without transfers (shm-local); on top of "
            "the floor's {:.3f} us an SHM round trip reaches at most {:.0f}% of the floor rate\n",
            format_bytes(m), ring_us, floor_us, 100 * floor_us / (floor_us + ring_us));
    }
}

void Results::print_bandwidth(const std::vector<size_t>& chunks, const std::vector<size_t>& rings,
                              size_t dram_bytes, size_t cached_bytes) const {
    const auto dram = summary("memcpy", "dram", dram_bytes, 0);
    const auto cached = summary("memcpy", "cached", cached_bytes, 0);
    fmt::print("\nmemcpy, one thread: {} buffers {} GB/s [{:.2f} - {:.2f}]; {} buffers {} GB/s\n",
               format_bytes(dram_bytes), dram ? fmt::format("{:.2f}", dram->median) : "FAILED",
               dram ? dram->min : 0.0, dram ? dram->max : 0.0, format_bytes(cached_bytes),
               cached ? fmt::format("{:.2f}", cached->median) : "FAILED");
    fmt::print(
        "SHM ring one-way bandwidth, GB/s (median) and % of the {} memcpy;\n"
        "rows: chunk size, columns: ring size\n",
        format_bytes(dram_bytes));
    fmt::print("{:>9}", "chunk");
    for (size_t r : rings)
        fmt::print(" {:>15}", format_bytes(r));
    fmt::print("\n");
    for (size_t c : chunks) {
        fmt::print("{:>9}", format_bytes(c));
        for (size_t r : rings) {
            const auto s = summary("bandwidth", "shm", c, r);
            if (!s)
                fmt::print(" {:>15}", "FAILED");
            else if (dram)
                fmt::print(" {:>15}", fmt::format("{:.2f} ({:.0f}%)", s->median,
                                                  100 * s->median / dram->median));
            else
                fmt::print(" {:>15.2f}", s->median);
        }
        fmt::print("\n");
    }
}

}  // namespace l5pg::microbench
