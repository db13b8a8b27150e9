// One-way bandwidth through one SHM ring, and the memcpy reference.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bench/microbench/pingpong.hpp"
#include "bench/microbench/placement.hpp"
#include "transport/wait/policy.hpp"

namespace l5pg::microbench {

inline constexpr size_t kMinChunk = 16;  // sequence number at both ends
inline constexpr size_t kStampStride = 4096;

struct BandwidthRun {
    double gb_per_second = 0;  // payload bytes (1 GB = 1e9 B)
    uint64_t bytes = 0;        // timed payload bytes
    double elapsed_seconds = 0;
    uint64_t chunks_total = 0;     // incl. warm-up; the reader must count the same
    uint64_t chunks_verified = 0;  // compared byte for byte by the reader
    uint64_t writer_polls = 0;     // times the writer blocked (ring full)
    uint64_t reader_polls = 0;     // times the reader blocked (ring empty)
};

// The parent writes `chunk_bytes` chunks with RingWriter::write (a chunk larger than
// max_record_payload(ring) = ring/2 - 4 becomes several records) and the child reads them
// with RingReader::read into its own buffer, both waiting the channel's adaptive way.
// Timed from an empty ring to an empty ring. Throws BenchError.
[[nodiscard]] BandwidthRun run_shm_bandwidth(size_t chunk_bytes, size_t ring_bytes,
                                             wait::WaitPolicy budget, const Timing& timing,
                                             const Placement& placement);

struct MemcpyRun {
    double gb_per_second = 0;  // bytes copied (each counted once) per second
    size_t buffer_bytes = 0;
};

// A buffer size well beyond the last-level cache (clamp(4 x LLC, 256 MiB, 512 MiB)).
[[nodiscard]] size_t memcpy_dram_buffer_bytes();
// A buffer size whose source and destination together fit in L2.
[[nodiscard]] size_t memcpy_cached_buffer_bytes();
// Single-thread memcpy between two private buffers of `buffer_bytes`, in this process.
[[nodiscard]] MemcpyRun run_memcpy(size_t buffer_bytes, const Timing& timing);

}  // namespace l5pg::microbench
