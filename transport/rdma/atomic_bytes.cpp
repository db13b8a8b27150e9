#include "transport/rdma/atomic_bytes.hpp"

#include <cstring>

namespace l5pg::rdma {
namespace {

constexpr uintptr_t kWord = sizeof(uint64_t);

[[nodiscard]] bool aligned(const void* p) noexcept {
    return reinterpret_cast<uintptr_t>(p) % kWord == 0;
}

}  // namespace

void store_relaxed(std::byte* dst, const std::byte* src, size_t n) noexcept {
    size_t i = 0;
    for (; i < n && !aligned(dst + i); ++i)
        atomic_at<uint8_t>(dst + i).store(static_cast<uint8_t>(src[i]), std::memory_order_relaxed);
    for (; i + kWord <= n; i += kWord) {
        uint64_t w;
        std::memcpy(&w, src + i, kWord);  // src is private; it may be unaligned
        atomic_at<uint64_t>(dst + i).store(w, std::memory_order_relaxed);
    }
    for (; i < n; ++i)
        atomic_at<uint8_t>(dst + i).store(static_cast<uint8_t>(src[i]), std::memory_order_relaxed);
}

void load_relaxed(std::byte* dst, const std::byte* src, size_t n) noexcept {
    auto* s = const_cast<std::byte*>(src);
    size_t i = 0;
    for (; i < n && !aligned(s + i); ++i)
        dst[i] = static_cast<std::byte>(atomic_at<uint8_t>(s + i).load(std::memory_order_relaxed));
    for (; i + kWord <= n; i += kWord) {
        const uint64_t w = atomic_at<uint64_t>(s + i).load(std::memory_order_relaxed);
        std::memcpy(dst + i, &w, kWord);
    }
    for (; i < n; ++i)
        dst[i] = static_cast<std::byte>(atomic_at<uint8_t>(s + i).load(std::memory_order_relaxed));
}

void zero_relaxed(std::byte* dst, size_t n) noexcept {
    size_t i = 0;
    for (; i < n && !aligned(dst + i); ++i)
        atomic_at<uint8_t>(dst + i).store(0, std::memory_order_relaxed);
    for (; i + kWord <= n; i += kWord)
        atomic_at<uint64_t>(dst + i).store(0, std::memory_order_relaxed);
    for (; i < n; ++i)
        atomic_at<uint8_t>(dst + i).store(0, std::memory_order_relaxed);
}

}  // namespace l5pg::rdma
