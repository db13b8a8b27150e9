// The shared-memory segment of one L5 SHM session (see docs/wire-format.md).
//
//   offset 0                    Header (kHeaderSize bytes)
//   offset kHeaderSize          client->server ring, c2s_size bytes
//   offset kHeaderSize+c2s_size server->client ring, s2c_size bytes
//
// Each ring is mapped twice back to back, so a record never wraps (L5 Fig. 5).
// Both processes write here: everything one side reads from the other's fields is
// untrusted and validated before use.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "transport/ring_bounds.hpp"

namespace l5pg::shm {

inline constexpr uint64_t kMagic = 0x314d485347503545ull;  // "E5PGSHM1" little-endian
inline constexpr uint32_t kLayoutVersion = 2;
inline constexpr size_t kCacheLine = 64;
inline constexpr size_t kHeaderSize = 4096;
using transport::kDefaultRingSize;  // ring-size bounds: transport/ring_bounds.hpp
using transport::kMaxRingSize;
using transport::kMinRingSize;
using transport::valid_ring_size;

// Records are [u32 payload length][payload][padding to kRecordAlign]. The length word is
// also the publication flag (L5 §III-B-2): the reader polls the length of the next record
// in the ring itself, so a message costs the reader one cache-line transfer fewer than
// polling a separate position would. 0 means "not published yet": before publishing a
// record the writer zeroes the length word that follows it, and it always keeps
// kRecordAlign bytes free for that word.
inline constexpr size_t kRecordHeaderSize = 4;
inline constexpr size_t kRecordAlign = 8;

static_assert((kMinRingSize & (kMinRingSize - 1)) == 0);
static_assert(kMinRingSize % kRecordAlign == 0);

// Control block of one direction. Positions are monotonically increasing byte counts;
// index into the ring = pos & (size - 1). The writer's position is not shared: the
// records' length words publish the data, read_pos returns the space.
struct RingControl {
    alignas(kCacheLine) std::atomic<uint64_t> read_pos{0};  // consumer-owned
    // Consumer is (about to be) blocked waiting for data: producer rings the doorbell.
    alignas(kCacheLine) std::atomic<uint32_t> reader_waiting{0};
    // The name of the wait that armed reader_waiting (transport/wait/wait_id.hpp), stored
    // before the flag: a producer that finds several flags armed under one name may ring
    // just one of them. 0: unnamed, ring. Written by the consumer; to the producer only a
    // value to compare (an added field in the flag's padding: older peers leave it 0).
    std::atomic<uint64_t> reader_wait_id{0};
    // Producer is (about to be) blocked waiting for space: consumer rings the doorbell.
    alignas(kCacheLine) std::atomic<uint32_t> writer_waiting{0};
};

struct Header {
    // Written by the client before handing the memfd over; the server copies them once
    // and checks them against the upgrade request and the file size.
    uint64_t magic;
    uint32_t version;
    uint32_t header_size;
    uint64_t c2s_size;
    uint64_t s2c_size;
    // Set (release) by a side after it has published its last record and before it
    // closes its socket; the peer re-checks its ring after seeing it (acquire).
    alignas(kCacheLine) std::atomic<uint32_t> client_closed{0};
    alignas(kCacheLine) std::atomic<uint32_t> server_closed{0};
    RingControl c2s;
    RingControl s2c;
    // Placement hints (cpu_hint.hpp), each written by its side only: CPU + 1 when that
    // side's waiting thread is confined to that one CPU, 0 otherwise. Advisory: they only
    // decide whether the other side spins. Added after the rings so that layout-2 peers
    // that predate them keep working (they leave theirs 0, "unknown").
    alignas(kCacheLine) std::atomic<uint32_t> client_sole_cpu{0};
    alignas(kCacheLine) std::atomic<uint32_t> server_sole_cpu{0};
    // The CPU the client's thread last began a wait on, + 1 (0: unknown), written by the
    // client only. Advisory: a worker that blocks for this one session moves there
    // (wait::CpuFollower), within the CPUs it may use anyway.
    alignas(kCacheLine) std::atomic<uint32_t> client_cpu{0};
};

static_assert(sizeof(Header) <= kHeaderSize);
// Offsets documented in docs/wire-format.md (the Python test client relies on them too).
static_assert(offsetof(Header, c2s) == 192 && offsetof(Header, s2c) == 384);
static_assert(offsetof(RingControl, reader_waiting) == 64 &&
              offsetof(RingControl, reader_wait_id) == 72 && sizeof(RingControl) == 192);
static_assert(offsetof(Header, client_sole_cpu) == 576);
static_assert(offsetof(Header, server_sole_cpu) == 640);
static_assert(offsetof(Header, client_cpu) == 704);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// Largest payload one record can carry in a ring of `ring_size` bytes. Bigger writes
// are split into several records (the channel is a byte stream).
[[nodiscard]] constexpr size_t max_record_payload(size_t ring_size) noexcept {
    return ring_size / 2 - kRecordHeaderSize;
}

[[nodiscard]] constexpr size_t record_footprint(size_t payload) noexcept {
    return (kRecordHeaderSize + payload + kRecordAlign - 1) & ~(kRecordAlign - 1);
}

}  // namespace l5pg::shm
