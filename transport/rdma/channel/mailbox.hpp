// The server's dense mailbox array (L5 Fig. 9): one byte per client slot, 64 slots per
// cache line, so one worker polls many idle clients with a few loads. A client sets its
// byte with a one-byte RDMA WRITE after its records; the server clears it (atomic
// exchange) before it looks at that client's ring. A set byte is only a hint: the ring
// itself says what is complete. Each slot is registered as its own one-byte region in
// the owning client's protection domain, so no client can touch another's byte.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "transport/rdma/atomic_bytes.hpp"
#include "transport/rdma/buffer.hpp"

namespace l5pg::rdma {

class MailboxArray {
  public:
    [[nodiscard]] static std::optional<MailboxArray> create(uint32_t slots, std::string& error);

    // Lowest free slot (its byte cleared), or nullopt when all are taken.
    [[nodiscard]] std::optional<uint32_t> acquire();
    void release(uint32_t slot) noexcept;
    [[nodiscard]] std::byte* slot_addr(uint32_t slot) const noexcept {
        return memory_.data() + slot;
    }
    [[nodiscard]] uint32_t slots() const noexcept { return slots_; }

    // Clears set bytes and writes their slots to `out`, at most out.size() of them (the
    // rest stay set for the next scan, which begins after the last slot this one looked
    // at: n scans of out.size() cover n * out.size() set slots before one is seen twice). A seq_cst
    // fence separates the clearing from whatever the caller reads next, so a record whose mailbox
    // WRITE lands after the clear sets the byte again instead of being missed.
    [[nodiscard]] size_t scan(std::span<uint32_t> out) noexcept;

  private:
    MailboxArray(Buffer memory, uint32_t slots);

    Buffer memory_;
    uint32_t slots_ = 0;
    std::vector<bool> used_;
    uint32_t used_end_ = 0;   // one past the highest slot in use: scan() stops there
    uint32_t resume_at_ = 0;  // where the next scan() starts
};

}  // namespace l5pg::rdma
