// Access to memory that another party writes or reads at the same time: the peer's
// RDMA WRITEs land in our rings while we poll them, and the soft device's thread
// applies WRITEs into memory the application is polling. Plain memcpy on such memory
// is a data race; these helpers use relaxed atomic accesses (8-byte words where
// aligned) and leave the ordering to an explicit acquire/release on a flag byte.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace l5pg::rdma {

// Copies private `src` into shared `dst` with relaxed atomic stores.
void store_relaxed(std::byte* dst, const std::byte* src, size_t n) noexcept;
// Copies shared `src` into private `dst` with relaxed atomic loads.
void load_relaxed(std::byte* dst, const std::byte* src, size_t n) noexcept;
// Zeroes shared memory with relaxed atomic stores.
void zero_relaxed(std::byte* dst, size_t n) noexcept;

template <class T>
[[nodiscard]] inline std::atomic_ref<T> atomic_at(std::byte* p) noexcept {
    return std::atomic_ref<T>(*reinterpret_cast<T*>(p));
}

[[nodiscard]] inline uint8_t load_u8(const std::byte* p, std::memory_order order) noexcept {
    return atomic_at<uint8_t>(const_cast<std::byte*>(p)).load(order);
}
// `p` must be 4-byte aligned.
[[nodiscard]] inline uint32_t load_u32(const std::byte* p, std::memory_order order) noexcept {
    return atomic_at<uint32_t>(const_cast<std::byte*>(p)).load(order);
}
inline void store_u8(std::byte* p, uint8_t v, std::memory_order order) noexcept {
    atomic_at<uint8_t>(p).store(v, order);
}

}  // namespace l5pg::rdma
