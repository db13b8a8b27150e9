#include "transport/rdma/channel/local_ring.hpp"

#include <algorithm>

#include "transport/rdma/atomic_bytes.hpp"

namespace l5pg::rdma {

const char* to_string(RecordState state) noexcept {
    switch (state) {
        case RecordState::Ready:
            return "ready";
        case RecordState::Empty:
            return "empty";
        case RecordState::InFlight:
            return "in flight";
        case RecordState::Corrupt:
            return "corrupt";
    }
    return "unknown";
}

LocalRing::LocalRing(AreaControl* control, std::byte* ring, size_t size) noexcept
    : control_(control), ring_(ring), size_(size) {}

RecordState LocalRing::check() noexcept {
    if (length_ != 0)
        return RecordState::Ready;
    const size_t mask = size_ - 1;
    const size_t off = pos_ & mask;  // 8-aligned: the header never wraps
    const uint32_t len = load_u32(ring_ + off, std::memory_order_acquire);
    const uint32_t check = load_u32(ring_ + off + 4, std::memory_order_acquire);
    if (len == 0 && check == 0)
        return RecordState::Empty;
    if (check != ~len)
        return RecordState::InFlight;  // torn: some header bytes have not landed yet
    // Consistent, so final (layout.hpp): an impossible length is the writer's fault.
    if (len == 0 || len > max_record_payload(size_)) {
        corrupt_reason_ = "record length out of range";
        return RecordState::Corrupt;
    }
    const uint8_t ok =
        load_u8(ring_ + ((off + kRecordHeaderSize + len) & mask), std::memory_order_acquire);
    if (ok == 0)
        return RecordState::InFlight;
    if (ok != kRecordOk) {
        corrupt_reason_ = "record OK byte has an invalid value";
        return RecordState::Corrupt;
    }
    // L5's second read of the length: after the OK byte nobody may write here any more.
    if (load_u32(ring_ + off, std::memory_order_relaxed) != len ||
        load_u32(ring_ + off + 4, std::memory_order_relaxed) != check) {
        corrupt_reason_ = "record header changed after its OK byte was set";
        return RecordState::Corrupt;
    }
    length_ = len;
    offset_ = 0;
    return RecordState::Ready;
}

size_t LocalRing::read(std::span<std::byte> out, RecordState& state) noexcept {
    const size_t mask = size_ - 1;
    size_t copied = 0;
    state = RecordState::Ready;
    while (copied < out.size()) {
        state = check();
        if (state != RecordState::Ready)
            break;
        const size_t n = std::min<size_t>(length_ - offset_, out.size() - copied);
        const size_t off = (pos_ + kRecordHeaderSize + offset_) & mask;
        const size_t first = std::min(n, size_ - off);
        // The peer may scribble on these bytes at any time; we copy them exactly once.
        load_relaxed(out.data() + copied, ring_ + off, first);
        if (n > first)
            load_relaxed(out.data() + copied + first, ring_, n - first);
        copied += n;
        offset_ += static_cast<uint32_t>(n);
        if (offset_ == length_)
            finish_record();
    }
    if (copied == out.size())
        state = RecordState::Ready;
    return copied;
}

// Zero the record, then publish the new position (release): the writer, which learns
// the position by RDMA READ, only ever writes into zeroed memory.
void LocalRing::finish_record() noexcept {
    const size_t footprint = record_footprint(length_);
    const size_t off = pos_ & (size_ - 1);
    const size_t first = std::min(footprint, size_ - off);
    zero_relaxed(ring_ + off, first);
    if (footprint > first)
        zero_relaxed(ring_, footprint - first);
    pos_ += footprint;
    ++records_;
    length_ = 0;
    offset_ = 0;
    control_->read_pos.store(pos_, std::memory_order_release);
}

}  // namespace l5pg::rdma
