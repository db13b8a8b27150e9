// Helpers shared by the shm unit tests.
#pragma once

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "transport/shm/ring.hpp"
#include "transport/shm/segment.hpp"

namespace l5pg::shm::test {

inline Segment make_segment(size_t c2s = kMinRingSize, size_t s2c = kMinRingSize) {
    SysError err;
    auto seg = Segment::create(c2s, s2c, err);
    INFO("Segment::create: " << (err.what ? err.what : "") << " errno " << err.err);
    REQUIRE(seg.has_value());
    return std::move(*seg);
}

// Writer and reader on the c2s ring of one segment, in this process.
struct RingPair {
    Segment seg;
    RingWriter writer;
    RingReader reader;

    explicit RingPair(size_t size = kMinRingSize)
        : seg(make_segment(size, kMinRingSize)),
          writer(seg.header().c2s, seg.c2s_data(), seg.c2s_size()),
          reader(seg.header().c2s, seg.c2s_data(), seg.c2s_size()) {}

    RingControl& control() { return seg.header().c2s; }
    std::byte* data() { return seg.c2s_data(); }
    size_t size() const { return seg.c2s_size(); }
};

// Deterministic content: byte i of a stream seeded with `seed`.
inline std::byte pattern_byte(uint64_t seed, uint64_t i) {
    uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    return static_cast<std::byte>(x & 0xff);
}

inline std::vector<std::byte> pattern(uint64_t seed, size_t n, uint64_t offset = 0) {
    std::vector<std::byte> v(n);
    for (size_t i = 0; i < n; ++i)
        v[i] = pattern_byte(seed, offset + i);
    return v;
}

}  // namespace l5pg::shm::test
