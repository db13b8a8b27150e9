// The soft device's memory regions of one protection domain. The device thread looks a
// key up and touches the memory while holding the table's shared lock; deregistration
// takes the exclusive lock, so once a MemoryRegion is destroyed no incoming WRITE can
// reach its memory any more.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "transport/rdma/device.hpp"

namespace l5pg::rdma::soft {

class RegionTable {
  public:
    RegionTable() noexcept;

    // Returns the key (used as both lkey and rkey; never 0).
    [[nodiscard]] uint32_t add(std::byte* addr, size_t length, Access access);
    void remove(uint32_t key) noexcept;

    // If [addr, addr + length) lies inside region `key` and the region grants `need`,
    // runs fn(pointer to addr) under the shared lock and returns Success; otherwise
    // returns RemoteAccessError without calling fn. Overflow-safe for any inputs.
    template <class Fn>
    [[nodiscard]] WcStatus with_range(uint32_t key, uint64_t addr, uint64_t length, Access need,
                                      Fn&& fn) {
        std::shared_lock lock(mutex_);
        const Region* r = find(key);
        if (r == nullptr || length == 0 || (need != Access::None && !has(r->access, need)))
            return WcStatus::RemoteAccessError;
        const uint64_t base = reinterpret_cast<uint64_t>(r->addr);
        if (addr < base || length > r->length || addr - base > r->length - length)
            return WcStatus::RemoteAccessError;
        fn(r->addr + (addr - base));
        return WcStatus::Success;
    }

  private:
    struct Region {
        std::byte* addr;
        size_t length;
        Access access;
        uint32_t key;
    };
    [[nodiscard]] const Region* find(uint32_t key) const noexcept;

    std::shared_mutex mutex_;
    std::vector<Region> regions_;
    uint32_t next_key_;
};

}  // namespace l5pg::rdma::soft
