// Ring-size bounds shared by every ring transport (shm/, rdma/) and the configuration
// that limits them (config/). Defined once here; the transports' layout headers and the
// config loader refer to these names, so a bound cannot drift between them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace l5pg::transport {

// One page: the smallest ring the record formats are checked against (shm/layout.hpp).
inline constexpr size_t kMinRingSize = 4096;
// Per direction; each SHM session maps its rings twice, each RDMA session registers them.
inline constexpr size_t kMaxRingSize = size_t{256} << 20;
inline constexpr size_t kDefaultRingSize = size_t{1} << 20;

static_assert((kMinRingSize & (kMinRingSize - 1)) == 0);
static_assert((kMaxRingSize & (kMaxRingSize - 1)) == 0);
static_assert(kMinRingSize <= kDefaultRingSize && kDefaultRingSize <= kMaxRingSize);

// Positions wrap with `pos & (size - 1)`: sizes are powers of two within the bounds.
[[nodiscard]] constexpr bool valid_ring_size(uint64_t size) noexcept {
    return size >= kMinRingSize && size <= kMaxRingSize && (size & (size - 1)) == 0;
}

}  // namespace l5pg::transport
