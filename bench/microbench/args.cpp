#include "bench/microbench/args.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "bench/microbench/bandwidth.hpp"
#include "bench/microbench/pingpong.hpp"
#include "transport/shm/layout.hpp"
#include "transport/wait/defaults.hpp"

namespace l5pg::microbench {
namespace {

constexpr size_t KiB = 1024;
constexpr size_t MiB = 1024 * KiB;

const char* const kUsage = R"(usage: l5pg-microbench [options]

Two processes (fork), each pinned to its own CPU, measure:
  * ping-pong round trips/s (64 B and 100 B) over the SHM ring (adaptive wait like the
    shim's channel, pure spinning, always-block), a Unix socket pair, TCP loopback
    (TCP_NODELAY), a pipe pair, and a raw cache-line ping-pong (the physical floor);
    shm-local runs both ring ends in one process: the ring code's own cost;
  * one-way SHM ring bandwidth, chunk size x ring size, against single-thread memcpy.

options:
  --seconds S        timed duration of each run (default 1; 0.2 with --quick)
  --repeat N         runs per cell (default 3); median, min and max are reported
  --quick            fewer bandwidth cells and shorter runs
  --csv PATH         write every run as CSV
                     (kind,transport,msg_bytes,ring_bytes,run,value,unit,placement)
  --cpus A,B         parent (client/writer) on CPU A, child (server/reader) on CPU B
                     (A may equal B); default: two different CPUs when there are >= 2
  --no-pin           do not pin: the scheduler places both processes
  --only WHAT        pingpong or bandwidth (default: both)
  --transports LIST  ping-pong transports, comma-separated, from:
                     cacheline,shm-spin,shm,shm-block,shm-local,unix,tcp,pipe
  --msg-sizes LIST   ping-pong message sizes in bytes (default 64,100; >= 16)
  --pingpong-ring N  SHM ring size per direction for ping-pong (default 1048576)
  --chunks LIST      bandwidth chunk sizes in bytes (default 4K..1M)
  --rings LIST       bandwidth ring sizes in bytes (default 64K..16M)
  --spin-us N        adaptive wait: spin budget (default 50, as L5PG_SPIN_US)
  --yield-us N       adaptive wait: sched_yield budget (default 200, as L5PG_YIELD_US)
  -h, --help         this text
)";

// kUsage states the defaults in words: keep them in step with transport/wait/defaults.hpp.
static_assert(wait::kDefaultSpinUs == 50 && wait::kDefaultYieldUs == 200);

[[noreturn]] void usage_error(const std::string& message) {
    fmt::print(stderr, "l5pg-microbench: {}\n\n{}", message, kUsage);
    std::exit(2);
}

// Accepts plain numbers and K/M suffixes (binary): "4K", "16M", "100".
size_t parse_size(std::string_view text, std::string_view option) {
    if (text.empty())
        usage_error(fmt::format("{}: empty size", option));
    size_t mult = 1;
    const char last = text.back();
    if (last == 'K' || last == 'k') {
        mult = KiB;
        text.remove_suffix(1);
    } else if (last == 'M' || last == 'm') {
        mult = MiB;
        text.remove_suffix(1);
    }
    const std::string s(text);
    char* end = nullptr;
    const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (s.empty() || end != s.c_str() + s.size() || v == 0)
        usage_error(fmt::format("{}: bad size '{}'", option, s));
    return static_cast<size_t>(v) * mult;
}

std::vector<std::string> split(std::string_view text) {
    std::vector<std::string> out;
    while (!text.empty()) {
        const size_t comma = text.find(',');
        out.emplace_back(text.substr(0, comma));
        if (comma == std::string_view::npos)
            break;
        text.remove_prefix(comma + 1);
    }
    return out;
}

std::vector<size_t> parse_size_list(std::string_view text, std::string_view option) {
    std::vector<size_t> out;
    for (const std::string& part : split(text))
        out.push_back(parse_size(part, option));
    if (out.empty())
        usage_error(fmt::format("{}: empty list", option));
    return out;
}

long parse_int(std::string_view text, std::string_view option, long lo, long hi) {
    const std::string s(text);
    char* end = nullptr;
    const long v = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || end != s.c_str() + s.size() || v < lo || v > hi)
        usage_error(
            fmt::format("{}: expected an integer in [{}, {}], got '{}'", option, lo, hi, s));
    return v;
}

}  // namespace

double Options::warmup_seconds() const noexcept {
    return std::clamp(seconds * 0.1, 0.02, 0.2);
}

Options parse_args(int argc, char** argv) {
    Options o;
    bool seconds_given = false;
    bool chunks_given = false;
    bool rings_given = false;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        auto value = [&]() -> std::string_view {
            if (i + 1 >= argc)
                usage_error(fmt::format("{} needs a value", arg));
            return argv[++i];
        };
        if (arg == "-h" || arg == "--help") {
            fmt::print("{}", kUsage);
            std::exit(0);
        } else if (arg == "--seconds") {
            const std::string s(value());
            char* end = nullptr;
            o.seconds = std::strtod(s.c_str(), &end);
            if (s.empty() || end != s.c_str() + s.size() || !(o.seconds > 0) || o.seconds > 3600)
                usage_error(fmt::format("--seconds: bad duration '{}'", s));
            seconds_given = true;
        } else if (arg == "--repeat") {
            o.repeat = static_cast<int>(parse_int(value(), arg, 1, 1000));
        } else if (arg == "--quick") {
            o.quick = true;
        } else if (arg == "--csv") {
            o.csv_path = value();
        } else if (arg == "--cpus") {
            const auto parts = split(value());
            if (parts.size() != 2)
                usage_error("--cpus: expected A,B");
            o.cpus = std::pair{static_cast<int>(parse_int(parts[0], arg, 0, 4095)),
                               static_cast<int>(parse_int(parts[1], arg, 0, 4095))};
        } else if (arg == "--no-pin") {
            o.no_pin = true;
        } else if (arg == "--only") {
            const std::string_view what = value();
            if (what == "pingpong")
                o.run_bandwidth = false;
            else if (what == "bandwidth")
                o.run_pingpong = false;
            else
                usage_error("--only: expected pingpong or bandwidth");
        } else if (arg == "--transports") {
            o.transports = split(value());
            for (const std::string& t : o.transports)
                if (!is_pingpong_transport(t))
                    usage_error(fmt::format("--transports: unknown transport '{}'", t));
        } else if (arg == "--msg-sizes") {
            o.msg_sizes = parse_size_list(value(), arg);
            for (size_t m : o.msg_sizes)
                if (m < kMinMessage || m > kMaxMessage)
                    usage_error(fmt::format("--msg-sizes: {} is outside [{}, {}]", m, kMinMessage,
                                            kMaxMessage));
        } else if (arg == "--pingpong-ring") {
            o.pingpong_ring = parse_size(value(), arg);
        } else if (arg == "--chunks") {
            o.chunk_sizes = parse_size_list(value(), arg);
            chunks_given = true;
        } else if (arg == "--rings") {
            o.ring_sizes = parse_size_list(value(), arg);
            rings_given = true;
        } else if (arg == "--spin-us") {
            o.spin_us = static_cast<unsigned>(parse_int(value(), arg, 0, wait::kMaxBudgetUs));
        } else if (arg == "--yield-us") {
            o.yield_us = static_cast<unsigned>(parse_int(value(), arg, 0, wait::kMaxBudgetUs));
        } else {
            usage_error(fmt::format("unknown argument '{}'", arg));
        }
    }
    if (o.cpus && o.no_pin)
        usage_error("--cpus and --no-pin exclude each other");
    if (o.quick && !seconds_given)
        o.seconds = 0.2;
    if (o.transports.empty())
        o.transports = pingpong_transports();
    if (!chunks_given)
        o.chunk_sizes = o.quick ? std::vector<size_t>{4 * KiB, 64 * KiB, MiB}
                                : std::vector<size_t>{4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, MiB};
    if (!rings_given)
        o.ring_sizes = o.quick ? std::vector<size_t>{64 * KiB, MiB, 16 * MiB}
                               : std::vector<size_t>{64 * KiB, 256 * KiB, MiB, 4 * MiB, 16 * MiB};
    for (size_t r : o.ring_sizes)
        if (!shm::valid_ring_size(r))
            usage_error(fmt::format("--rings: {} is not a power of two in [4 KiB, 256 MiB]", r));
    if (!shm::valid_ring_size(o.pingpong_ring))
        usage_error("--pingpong-ring: not a power of two in [4 KiB, 256 MiB]");
    for (size_t c : o.chunk_sizes)
        if (c < kMinChunk || c % 8 != 0)
            usage_error(
                fmt::format("--chunks: {} must be a multiple of 8 and >= {}", c, kMinChunk));
    return o;
}

std::string format_bytes(size_t bytes) {
    if (bytes >= MiB && bytes % MiB == 0)
        return fmt::format("{} MiB", bytes / MiB);
    if (bytes >= KiB && bytes % KiB == 0)
        return fmt::format("{} KiB", bytes / KiB);
    return fmt::format("{} B", bytes);
}

}  // namespace l5pg::microbench
