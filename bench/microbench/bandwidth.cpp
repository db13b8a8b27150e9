// SHM ring bandwidth: writer (parent) -> reader (child) through one ring of a Segment.
//
// Verification: every chunk carries its sequence number at its start, its complement at
// its end, and a word derived from (sequence, page) at each 4 KiB boundary; the reader
// checks all of these for every chunk and compares the whole chunk with the expected
// bytes for the first 64 chunks and every 64th after. At the end the reader's chunk
// count must equal the writer's.
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "bench/microbench/bandwidth.hpp"
#include "bench/microbench/pingpong_loop.hpp"
#include "bench/microbench/process.hpp"
#include "bench/microbench/shm_link.hpp"

namespace l5pg::microbench {
namespace {

constexpr uint64_t kFullCheckEvery = 64;

uint64_t page_stamp(uint64_t seq, size_t page) noexcept {
    return (seq + 1) * 0x9e3779b97f4a7c15ull ^ (page + 1) * 0xbf58476d1ce4e5b9ull;
}

// Calls fn(offset, value) for every stamp word of chunk `seq`.
template <class Fn>
void for_each_stamp(size_t n, uint64_t seq, Fn fn) {
    fn(0, seq);
    for (size_t off = kStampStride; off + 16 <= n; off += kStampStride)
        fn(off, page_stamp(seq, off / kStampStride));
    fn(n - 8, ~seq);
}

void stamp_chunk(std::byte* chunk, size_t n, uint64_t seq) noexcept {
    for_each_stamp(n, seq, [chunk](size_t off, uint64_t v) { std::memcpy(chunk + off, &v, 8); });
}

bool stamps_ok(const std::byte* chunk, size_t n, uint64_t seq) noexcept {
    bool ok = true;
    for_each_stamp(n, seq, [&](size_t off, uint64_t v) {
        uint64_t got;
        std::memcpy(&got, chunk + off, 8);
        ok &= got == v;
    });
    return ok;
}

int run_reader(ShmLink& link, size_t n, ChildReport& report) {
    std::vector<std::byte> buf(n), expected(n);
    fill_pattern(expected.data(), n);
    uint64_t verified = 0;
    for (uint64_t expect = 0;; ++expect) {
        link.recv(buf.data(), n);
        uint64_t seq;
        std::memcpy(&seq, buf.data(), 8);
        if (seq != expect && seq != kStopSeq)
            throw BenchError("reader: chunk " + std::to_string(seq) + ", expected " +
                             std::to_string(expect));
        if (!stamps_ok(buf.data(), n, seq))
            throw BenchError("reader: chunk " + std::to_string(seq) + " has a bad stamp");
        if (seq < kFullCheckEvery || seq % kFullCheckEvery == 0 || seq == kStopSeq) {
            stamp_chunk(expected.data(), n, seq);
            if (std::memcmp(buf.data(), expected.data(), n) != 0)
                throw BenchError("reader: chunk " + std::to_string(seq) + " content differs");
            ++verified;
        }
        if (seq == kStopSeq) {
            report.count[0].store(expect);
            report.count[1].store(verified);
            report.count[2].store(link.polls());
            return kChildOk;
        }
    }
}

}  // namespace

BandwidthRun run_shm_bandwidth(size_t n, size_t ring_bytes, wait::WaitPolicy budget,
                               const Timing& timing, const Placement& placement) {
    using clock = std::chrono::steady_clock;
    using seconds = std::chrono::duration<double>;
    shm::Segment seg = make_segment(ring_bytes, shm::kMinRingSize);
    FdPair doorbell = make_socketpair();
    shm::Header& h = seg.header();
    SharedReport report;

    ChildProcess child = ChildProcess::spawn(placement, report.get(), [&] {
        doorbell.a.reset();
        ShmLink link({}, shm::RingReader(h.c2s, seg.c2s_data(), seg.c2s_size()), doorbell.b.get(),
                     ShmWait::Adaptive, budget);
        return run_reader(link, n, report.get());
    });
    doorbell.b.reset();

    BandwidthRun run;
    std::vector<std::byte> src(n);
    fill_pattern(src.data(), n);
    uint64_t seq = 0;
    try {
        ShmLink link(shm::RingWriter(h.c2s, seg.c2s_data(), seg.c2s_size()), {}, doorbell.a.get(),
                     ShmWait::Adaptive, budget);
        auto send_chunk = [&](uint64_t s) {
            stamp_chunk(src.data(), n, s);
            link.send(src.data(), n);
        };
        // Warm-up: at least two laps of the ring, so every page of both mappings is
        // faulted in before timing.
        const auto w0 = clock::now();
        uint64_t warm_bytes = 0;
        do {
            send_chunk(seq++);
            warm_bytes += n;
        } while (seconds(clock::now() - w0).count() < timing.warmup_seconds ||
                 warm_bytes < 2 * ring_bytes + n);
        link.wait_until_drained();

        // Timed: from an empty ring until the reader has consumed the last chunk.
        const uint64_t batch = std::max<uint64_t>(1, (size_t{64} << 10) / n);
        const auto t0 = clock::now();
        uint64_t chunks = 0;
        do {
            for (uint64_t i = 0; i < batch; ++i)
                send_chunk(seq++);
            chunks += batch;
        } while (seconds(clock::now() - t0).count() < timing.seconds);
        link.wait_until_drained();
        run.elapsed_seconds = seconds(clock::now() - t0).count();
        run.bytes = chunks * n;
        run.gb_per_second = static_cast<double>(run.bytes) / run.elapsed_seconds / 1e9;
        run.chunks_total = seq;
        run.writer_polls = link.polls();
        send_chunk(kStopSeq);
    } catch (const BenchError& e) {
        const std::string why = report.message();
        throw BenchError(why.empty() ? e.what() : std::string(e.what()) + "; reader: " + why);
    }
    child.wait_ok(report);
    const uint64_t received = report.get().count[0].load();
    if (received != run.chunks_total)
        throw BenchError("reader received " + std::to_string(received) + " chunks, writer sent " +
                         std::to_string(run.chunks_total));
    run.chunks_verified = report.get().count[1].load();
    run.reader_polls = report.get().count[2].load();
    return run;
}

}  // namespace l5pg::microbench
