#include "transport/rdma/channel/remote_ring.hpp"

#include <algorithm>
#include <cstring>

#include "transport/rdma/sys.hpp"

namespace l5pg::rdma {

RemoteRing::RemoteRing(std::byte* staging, uint32_t lkey, uint64_t remote_ring, uint32_t rkey,
                       size_t size, size_t max_payload) noexcept
    : staging_(staging),
      lkey_(lkey),
      remote_ring_(remote_ring),
      rkey_(rkey),
      size_(size),
      max_payload_(std::min(max_payload, max_record_payload(size))) {}

size_t RemoteRing::fits(uint64_t write_pos) const noexcept {
    const uint64_t reusable = std::min(read_pos_, completed_pos_);
    const size_t free = size_ - static_cast<size_t>(write_pos - reusable);
    const size_t usable = free & ~(kRecordAlign - 1);
    if (usable < record_footprint(1))
        return 0;
    // footprint(p) <= usable  <=>  header + p + OK byte <= usable (usable is aligned)
    return std::min(usable - kRecordHeaderSize - 1, max_payload_);
}

size_t RemoteRing::payload_that_fits() const noexcept {
    return fits(write_pos_);
}

size_t RemoteRing::payload_that_fits_after(size_t payload) const noexcept {
    return fits(write_pos_ + record_footprint(payload));
}

size_t RemoteRing::stage(std::span<const std::byte> payload,
                         std::array<WorkRequest, 2>& wrs) noexcept {
    const size_t mask = size_ - 1;
    const size_t n = payload.size();
    const size_t off = write_pos_ & mask;
    const uint32_t len = static_cast<uint32_t>(n);
    std::byte header[kRecordHeaderSize];
    sys::put_le(header, len, 4);
    sys::put_le(header + 4, ~len, 4);
    // Staging mirrors the remote ring, so the record wraps in it exactly as it will in
    // the peer's ring. The header never wraps (8-aligned offset, size a multiple of 8).
    std::memcpy(staging_ + off, header, kRecordHeaderSize);
    const size_t body = (off + kRecordHeaderSize) & mask;
    const size_t first = std::min(n, size_ - body);
    std::memcpy(staging_ + body, payload.data(), first);
    std::memcpy(staging_, payload.data() + first, n - first);
    staging_[(off + kRecordHeaderSize + n) & mask] = static_cast<std::byte>(kRecordOk);

    const size_t total = record_bytes(n);
    const size_t head = std::min(total, size_ - off);
    wrs[0] = WorkRequest{};
    wrs[0].opcode = Opcode::Write;
    wrs[0].local = staging_ + off;
    wrs[0].lkey = lkey_;
    wrs[0].length = static_cast<uint32_t>(head);
    wrs[0].remote_addr = remote_ring_ + off;
    wrs[0].rkey = rkey_;
    size_t count = 1;
    if (total > head) {
        wrs[1] = wrs[0];
        wrs[1].local = staging_;
        wrs[1].length = static_cast<uint32_t>(total - head);
        wrs[1].remote_addr = remote_ring_;
        count = 2;
    }
    write_pos_ += record_footprint(n);
    return count;
}

bool RemoteRing::update_read_pos(uint64_t pos) noexcept {
    if (pos < read_pos_ || pos > write_pos_ || pos % kRecordAlign != 0)
        return false;
    read_pos_ = pos;
    return true;
}

void RemoteRing::note_completed(uint64_t pos) noexcept {
    completed_pos_ = std::max(completed_pos_, std::min(pos, write_pos_));
}

}  // namespace l5pg::rdma
