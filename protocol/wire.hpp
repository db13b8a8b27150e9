// Big-endian integer access for PG v3 wire data. Pure functions, no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace l5pg::protocol {

inline uint16_t read_be16(const std::byte* p) noexcept {
    uint16_t v;
    std::memcpy(&v, p, sizeof v);
    return __builtin_bswap16(v);
}

inline uint32_t read_be32(const std::byte* p) noexcept {
    uint32_t v;
    std::memcpy(&v, p, sizeof v);
    return __builtin_bswap32(v);
}

inline uint64_t read_be64(const std::byte* p) noexcept {
    uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return __builtin_bswap64(v);
}

inline void write_be32(std::byte* p, uint32_t v) noexcept {
    v = __builtin_bswap32(v);
    std::memcpy(p, &v, sizeof v);
}

inline void write_be64(std::byte* p, uint64_t v) noexcept {
    v = __builtin_bswap64(v);
    std::memcpy(p, &v, sizeof v);
}

}  // namespace l5pg::protocol
