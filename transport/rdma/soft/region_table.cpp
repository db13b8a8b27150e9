#include "transport/rdma/soft/region_table.hpp"

#include <algorithm>
#include <random>

namespace l5pg::rdma::soft {

// Keys start at a random point so that a key from one connection means nothing in the
// next (protection domains already isolate peers; this is only defence in depth).
RegionTable::RegionTable() noexcept : next_key_(static_cast<uint32_t>(std::random_device{}())) {}

uint32_t RegionTable::add(std::byte* addr, size_t length, Access access) {
    std::unique_lock lock(mutex_);
    uint32_t key;
    do {
        next_key_ += 0x9e3779b1u;  // odd step: visits every 32-bit value before repeating
        key = next_key_;
    } while (key == 0 || find(key) != nullptr);
    regions_.push_back(Region{addr, length, access, key});
    return key;
}

void RegionTable::remove(uint32_t key) noexcept {
    std::unique_lock lock(mutex_);
    std::erase_if(regions_, [key](const Region& r) { return r.key == key; });
}

const RegionTable::Region* RegionTable::find(uint32_t key) const noexcept {
    for (const Region& r : regions_) {
        if (r.key == key)
            return &r;
    }
    return nullptr;
}

}  // namespace l5pg::rdma::soft
