// Single-producer single-consumer record ring over shared memory (L5 §III).
//
// Each endpoint keeps its own position privately. The reader learns about new records by
// polling the next record's length word in the ring; the writer learns about free space
// from the reader's published read_pos. A read position that is impossible (behind what
// was already seen, beyond what was written, misaligned) or a record length that does
// not fit makes the call return Corrupt, and the caller closes that one session.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "transport/shm/layout.hpp"

namespace l5pg::shm {

enum class RingStatus { Ok, Empty, Full, Corrupt };

[[nodiscard]] const char* to_string(RingStatus status) noexcept;

class RingWriter {
  public:
    RingWriter() = default;
    // `data` is the double mapping (2 * size bytes); size is a valid_ring_size().
    RingWriter(RingControl& control, std::byte* data, size_t size) noexcept;

    // Reserves room for one record with up to `want` payload bytes (capped at
    // max_record_payload). Ok: `out` is the writable payload area, 1..want bytes.
    // Full: not even one byte fits. Corrupt: the reader's position is impossible.
    // The cached reader position is refreshed only when short of space.
    [[nodiscard]] RingStatus reserve(size_t want, std::span<std::byte>& out) noexcept;
    // Publishes the reserved record with `n` (1..reserved) payload bytes: zeroes the
    // length word after it, then stores its own length word (release).
    void commit(size_t n) noexcept;
    // Copies as much of `bytes` as fits into one or more records. Returns bytes written
    // (0 when full); Corrupt is reported through `status`.
    [[nodiscard]] size_t write(std::span<const std::byte> bytes, RingStatus& status) noexcept;

    // Bytes free for the next reserve (after refreshing the reader position).
    [[nodiscard]] size_t free_bytes() noexcept;
    [[nodiscard]] bool empty() noexcept;  // reader has consumed everything published

    // After publishing: seq_cst fence, then if the reader armed reader_waiting, clear
    // it and return true: the caller must ring the doorbell (see wait.hpp).
    [[nodiscard]] bool reader_needs_wakeup() noexcept;
    // Before blocking for space: arm writer_waiting (then re-check free_bytes()).
    void arm() noexcept;
    // Disarm; returns false if the reader already consumed the flag (a doorbell byte is
    // then on its way and should be drained).
    bool disarm() noexcept;

    [[nodiscard]] uint64_t position() const noexcept { return write_pos_; }
    [[nodiscard]] size_t size() const noexcept { return size_; }

  private:
    RingControl* control_ = nullptr;
    std::byte* data_ = nullptr;
    size_t size_ = 0;
    uint64_t write_pos_ = 0;        // private copy, authoritative
    uint64_t cached_read_pos_ = 0;  // last validated reader position
    size_t reserved_ = 0;

    [[nodiscard]] bool refresh_read_pos() noexcept;  // false: impossible position
    [[nodiscard]] size_t payload_that_fits() const noexcept;
};

class RingReader {
  public:
    RingReader() = default;
    RingReader(RingControl& control, std::byte* data, size_t size) noexcept;

    // Ok: `out` is the unread rest of the current record (never empty). The bytes are
    // in shared memory: copy them before parsing. Empty: nothing published. Corrupt:
    // the writer's position or the record length is impossible.
    [[nodiscard]] RingStatus peek(std::span<const std::byte>& out) noexcept;
    // Consumes n bytes of what peek returned; once a record is fully consumed the read
    // position is published (release store).
    void consume(size_t n) noexcept;
    // Copies up to out.size() bytes across records. Returns bytes copied.
    [[nodiscard]] size_t read(std::span<std::byte> out, RingStatus& status) noexcept;
    // True when a published record is waiting (acquire load of its length word). A
    // corrupt length counts as data: the next peek() reports it.
    [[nodiscard]] bool has_data() noexcept;

    // After consuming: seq_cst fence, then if the writer armed writer_waiting, clear it
    // and return true: the caller must ring the doorbell.
    [[nodiscard]] bool writer_needs_wakeup() noexcept;
    // Before blocking for data: arm reader_waiting (then re-check has_data()).
    void arm() noexcept;
    bool disarm() noexcept;

    [[nodiscard]] uint64_t position() const noexcept { return read_pos_; }
    [[nodiscard]] size_t size() const noexcept { return size_; }

  private:
    RingControl* control_ = nullptr;
    std::byte* data_ = nullptr;
    size_t size_ = 0;
    uint64_t read_pos_ = 0;       // start of the current record, private copy
    uint32_t record_length_ = 0;  // validated payload length of it, 0 = not read yet
    uint32_t record_offset_ = 0;  // payload bytes of the current record consumed

    [[nodiscard]] uint32_t poll_length() const noexcept;  // the current record's length word
};

}  // namespace l5pg::shm
