#include "transport/rdma/channel/mailbox.hpp"

#include <algorithm>

namespace l5pg::rdma {

std::optional<MailboxArray> MailboxArray::create(uint32_t slots, std::string& error) {
    if (slots == 0 || slots > (1u << 20)) {
        error = "mailbox slot count must be 1..1048576";
        return std::nullopt;
    }
    // Whole 8-byte words, so scan() can load a word at a time.
    auto memory = Buffer::allocate((slots + 7) / 8 * 8, error);
    if (!memory)
        return std::nullopt;
    return MailboxArray(std::move(*memory), slots);
}

MailboxArray::MailboxArray(Buffer memory, uint32_t slots)
    : memory_(std::move(memory)), slots_(slots), used_(slots, false) {}

std::optional<uint32_t> MailboxArray::acquire() {
    for (uint32_t i = 0; i < slots_; ++i) {
        if (!used_[i]) {
            used_[i] = true;
            used_end_ = std::max(used_end_, i + 1);
            store_u8(slot_addr(i), 0, std::memory_order_relaxed);
            return i;
        }
    }
    return std::nullopt;
}

void MailboxArray::release(uint32_t slot) noexcept {
    if (slot >= slots_)
        return;
    used_[slot] = false;
    store_u8(slot_addr(slot), 0, std::memory_order_relaxed);
    while (used_end_ > 0 && !used_[used_end_ - 1])
        --used_end_;
}

size_t MailboxArray::scan(std::span<uint32_t> out) noexcept {
    size_t n = 0;
    // Slots past used_end_ are free; their bytes were zeroed at release and no client
    // holds a memory region on them.
    const uint32_t end = used_end_;
    uint32_t slot = resume_at_ < end ? resume_at_ : 0;
    while (slot < end && n < out.size()) {
        std::byte* base = memory_.data() + slot;
        if (slot % 8 == 0 && atomic_at<uint64_t>(base).load(std::memory_order_relaxed) == 0) {
            slot += 8;  // the common case: eight idle clients in one load
            continue;
        }
        // acquire: pairs with the release of the mailbox byte (the last byte of its
        // WRITE), so the records written before it are visible.
        if (load_u8(base, std::memory_order_relaxed) != 0 &&
            atomic_at<uint8_t>(base).exchange(0, std::memory_order_acq_rel) != 0)
            out[n++] = slot;
        ++slot;
    }
    // The next scan goes on from here: clients that set their bytes again at once must not
    // keep the ones above them from being seen.
    resume_at_ = slot < end ? slot : 0;
    if (n > 0)
        std::atomic_thread_fence(std::memory_order_seq_cst);
    return n;
}

}  // namespace l5pg::rdma
