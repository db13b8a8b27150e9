// The reading end of a ring in our own area, which the peer fills with RDMA WRITEs. No
// write position is shared: the reader looks at the record at its read position and
// decides from the record alone whether it is complete (layout.hpp explains why that is
// safe even when bytes land in any order). Everything read from the ring is untrusted:
// lengths are validated and payload bytes are copied out before anyone parses them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "transport/rdma/channel/layout.hpp"

namespace l5pg::rdma {

enum class RecordState : uint8_t {
    Ready,     // a complete record (or the rest of one) can be read
    Empty,     // nothing written at the read position (header all zero)
    InFlight,  // something is being written there: header torn or OK byte not yet set
    Corrupt,   // a complete header with an impossible length, or a bad OK byte
};
[[nodiscard]] const char* to_string(RecordState state) noexcept;

class LocalRing {
  public:
    LocalRing() = default;
    // `ring` has `size` bytes (valid_ring_size), zero-filled; `control` is our area's.
    LocalRing(AreaControl* control, std::byte* ring, size_t size) noexcept;

    // State of the record at the read position; Ready when part of it is still unread.
    [[nodiscard]] RecordState check() noexcept;
    // The unread payload of the record at the read position if it is Ready, else 0.
    [[nodiscard]] size_t unread_bytes() noexcept {
        return check() == RecordState::Ready ? length_ - offset_ : 0;
    }
    // Copies up to out.size() bytes from consecutive ready records. A fully read record
    // is zeroed and the read position published (release). `state` is Ready if `out` was
    // filled, else the state of the record that stopped the copy.
    [[nodiscard]] size_t read(std::span<std::byte> out, RecordState& state) noexcept;

    [[nodiscard]] uint64_t position() const noexcept { return pos_; }
    [[nodiscard]] size_t size() const noexcept { return size_; }
    [[nodiscard]] const char* corrupt_reason() const noexcept { return corrupt_reason_; }
    [[nodiscard]] uint64_t records() const noexcept { return records_; }  // fully read

  private:
    void finish_record() noexcept;

    AreaControl* control_ = nullptr;
    std::byte* ring_ = nullptr;
    size_t size_ = 0;
    uint64_t pos_ = 0;     // start of the current record, private copy
    uint32_t length_ = 0;  // validated payload length of it; 0 = not yet checked
    uint32_t offset_ = 0;  // payload bytes of it already read
    uint64_t records_ = 0;
    const char* corrupt_reason_ = "";
};

}  // namespace l5pg::rdma
