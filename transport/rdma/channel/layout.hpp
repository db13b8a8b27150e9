// Memory layout of the L5 RDMA channel (L5 §IV-D; byte tables in transport/rdma/README.md).
//
// Each side owns one *area*, registered as one memory region with its own rkey in a
// protection domain of its own: [AreaControl, kControlSize bytes][ring, ring_size bytes].
// The peer RDMA WRITEs records into the ring and flags into the control block, and RDMA
// READs the owner's read position from it. The server additionally owns a dense mailbox
// array (one byte per client slot); each client may WRITE only its own byte, which is
// registered as a separate one-byte region in that client's protection domain.
//
// Records: [u32 len][u32 ~len][payload, len bytes][u8 OK = 1][zero padding to 8 bytes],
// written by one RDMA WRITE (two when the record wraps around the ring end; WRITEs of
// one QP execute in order, so the OK byte is still the last byte to land). The reader
// zeroes every record it consumed before it publishes its new read position, so the
// writer always writes into zeroed memory. That makes the header tear-proof even if the
// bytes of a WRITE land in any order: in each byte position a landed byte of `len` and a
// not-yet-landed (zero) byte of `~len`, or the reverse, can only agree with each other if
// they already hold their final values. A consistent header therefore has its final
// length, which locates the OK byte; the OK byte is the last byte of the WRITE, stored
// with release semantics, so once it reads 1 the whole record is there. Reading the
// header again afterwards is the paper's torn-write check; for an honest peer it can
// never differ.
#pragma once

#include <algorithm>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "transport/ring_bounds.hpp"

namespace l5pg::rdma {

inline constexpr size_t kCacheLine = 64;
using transport::kDefaultRingSize;  // ring-size bounds: transport/ring_bounds.hpp
using transport::kMaxRingSize;
using transport::kMinRingSize;
using transport::valid_ring_size;

// Control block at the start of every area. read_pos is written only by the owner (the
// peer READs it); the two flags only by the peer (the owner exchanges them to 0).
struct AreaControl {
    // Owner's read position in its ring (monotonic byte count, multiple of 8).
    alignas(kCacheLine) std::atomic<uint64_t> read_pos{0};
    // Peer is (about to be) blocked waiting for data in *its* ring: after the owner's
    // next data WRITE into the peer's ring has completed, it rings the doorbell.
    alignas(kCacheLine) std::atomic<uint8_t> peer_rx_waiting{0};
    // Peer is (about to be) blocked waiting for space in *this* ring: after the owner
    // consumes, it rings the doorbell.
    alignas(kCacheLine) std::atomic<uint8_t> peer_tx_waiting{0};
};
inline constexpr size_t kControlSize = 256;
inline constexpr size_t kReadPosOffset = 0;
inline constexpr size_t kPeerRxWaitingOffset = 64;
inline constexpr size_t kPeerTxWaitingOffset = 128;
static_assert(sizeof(AreaControl) <= kControlSize);
static_assert(offsetof(AreaControl, read_pos) == kReadPosOffset);
static_assert(offsetof(AreaControl, peer_rx_waiting) == kPeerRxWaitingOffset);
static_assert(offsetof(AreaControl, peer_tx_waiting) == kPeerTxWaitingOffset);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint8_t>::is_always_lock_free);

// The longest WRITE or READ a channel whose rings are at most `max_ring_size` bytes can make:
// a whole area. A soft device told so refuses a longer frame from its peer before it sets
// memory aside for it (DeviceOptions::soft_max_message, within the 4 KiB .. 1 GiB it takes).
[[nodiscard]] constexpr uint32_t largest_message(uint64_t max_ring_size) noexcept {
    return static_cast<uint32_t>(
        std::clamp<uint64_t>(kControlSize + max_ring_size, 4096, uint64_t{1} << 30));
}

// Private scratch space at the start of each side's staging region (never remote
// accessible): the landing spot of READs of the peer's read_pos and the constant byte
// 1 that flag and mailbox WRITEs send.
inline constexpr size_t kScratchSize = 64;
inline constexpr size_t kScratchReadPos = 0;
inline constexpr size_t kScratchOne = 8;

inline constexpr size_t kRecordHeaderSize = 8;
inline constexpr size_t kRecordAlign = 8;
inline constexpr uint8_t kRecordOk = 1;

// Bytes the record's WRITE(s) cover: header, payload, OK byte.
[[nodiscard]] constexpr size_t record_bytes(size_t payload) noexcept {
    return kRecordHeaderSize + payload + 1;
}
// Ring space the record occupies.
[[nodiscard]] constexpr size_t record_footprint(size_t payload) noexcept {
    return (record_bytes(payload) + kRecordAlign - 1) & ~(kRecordAlign - 1);
}
// Largest payload a reader accepts in a ring of `ring_size` bytes; writers split bigger
// messages into several records (the channel is a byte stream).
[[nodiscard]] constexpr size_t max_record_payload(size_t ring_size) noexcept {
    return ring_size / 2 - kRecordHeaderSize - kRecordAlign;
}
static_assert(record_footprint(max_record_payload(kMinRingSize)) <= kMinRingSize / 2);

}  // namespace l5pg::rdma
