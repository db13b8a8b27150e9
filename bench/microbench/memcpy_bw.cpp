// The reference: single-thread memcpy bandwidth, out of cache and in L2.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "bench/microbench/bandwidth.hpp"
#include "bench/microbench/posix.hpp"

namespace l5pg::microbench {

size_t memcpy_dram_buffer_bytes() {
    constexpr size_t MiB = size_t{1} << 20;
    long llc = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0)
        llc = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
    const size_t want = 4 * static_cast<size_t>(std::max(llc, 0L));
    return std::clamp(want, 256 * MiB, 512 * MiB);
}

size_t memcpy_cached_buffer_bytes() {
    const long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
    // Source + destination take half of L2 (64 KiB each when L2 is unknown).
    const size_t quarter = l2 > 0 ? static_cast<size_t>(l2) / 4 : size_t{64} << 10;
    return std::clamp<size_t>(quarter, size_t{16} << 10, size_t{1} << 20);
}

MemcpyRun run_memcpy(size_t n, const Timing& timing) {
    using clock = std::chrono::steady_clock;
    using seconds = std::chrono::duration<double>;
    Mapping src(n, Mapping::Kind::Private);
    Mapping dst(n, Mapping::Kind::Private);
    std::memset(src.data(), 0x5a, n);  // fault every page in before timing
    std::memset(dst.data(), 0, n);
    for (size_t i = 0; i < n; i += 4096)
        src.data()[i] = static_cast<std::byte>(i >> 12);

    // Copies per clock read: about 1 ms worth for small buffers.
    const uint64_t batch = std::max<uint64_t>(1, (size_t{64} << 20) / n);
    const auto w0 = clock::now();
    do {
        std::memcpy(dst.data(), src.data(), n);
    } while (seconds(clock::now() - w0).count() < timing.warmup_seconds);

    uint64_t copies = 0;
    const auto t0 = clock::now();
    double elapsed = 0;
    do {
        for (uint64_t i = 0; i < batch; ++i) {
            std::memcpy(dst.data(), src.data(), n);
            asm volatile("" ::: "memory");  // every copy happens
        }
        copies += batch;
        elapsed = seconds(clock::now() - t0).count();
    } while (elapsed < timing.seconds);
    if (std::memcmp(dst.data(), src.data(), n) != 0)
        throw BenchError("memcpy: destination differs from source");
    MemcpyRun run;
    run.buffer_bytes = n;
    run.gb_per_second = static_cast<double>(copies) * static_cast<double>(n) / elapsed / 1e9;
    return run;
}

}  // namespace l5pg::microbench
