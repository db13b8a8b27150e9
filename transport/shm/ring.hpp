// Single-producer single-consumer record ring over shared memory (L5 §III).
//
// Each endpoint keeps its own position privately. The reader learns about new records by
// polling the next record's length word in the ring; the writer learns about free space
// from the reader's published read_pos. A read position that is impossible (behind what
// was already seen, beyond what was written, misaligned) or a record length that does
// not fit makes the call return Corrupt, and the caller closes that one session.
//
// The per-message steps (write, reserve, commit, read, peek, consume, has_data) are inline
// below: they run once per message in the callers' spin loops, and a call into another
// translation unit per step measurably costs ping-pong rate (docs/performance.md).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>

#include "transport/shm/layout.hpp"
#include "transport/wait/wait_id.hpp"

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
    // Whether a record fits now (Ok), not yet (Full), or never: the reader's position is
    // impossible (Corrupt), which free_bytes() reports as no room.
    [[nodiscard]] RingStatus room() noexcept;
    [[nodiscard]] bool empty() noexcept;  // reader has consumed everything published

    // After publishing: seq_cst fence, then if the reader armed reader_waiting, clear
    // it and return true: the caller must ring the doorbell (see transport/wait/block.hpp),
    // unless it already rang for the same named wait (`wait_id`: the name the reader armed
    // the flag under, or that of a later arming; transport/wait/wait_id.hpp).
    [[nodiscard]] bool reader_needs_wakeup(uint64_t& wait_id) noexcept;
    [[nodiscard]] bool reader_needs_wakeup() noexcept {
        uint64_t ignored = wait::kUnnamedWait;
        return reader_needs_wakeup(ignored);
    }
    // Before blocking for space: arm writer_waiting (then re-check free_bytes()).
    void arm() noexcept;
    // Disarm; returns false if the reader already consumed the flag (a doorbell byte is
    // then on its way and should be drained).
    bool disarm() noexcept;
    // Whether writer_waiting is still armed: false once the reader took it (and rang), or the
    // writer disarmed it.
    [[nodiscard]] bool armed() const noexcept;

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
    void commit_copy(std::span<const std::byte> payload) noexcept;
    template <class FillPolledLine>
    void publish(size_t n, FillPolledLine&& fill_polled_line) noexcept;
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
    // As read(), but consumes nothing (recv()'s MSG_PEEK): the unread bytes from `skip`
    // bytes past the current position on, across the published records. Empty when there
    // are none; Corrupt as peek() says it, for any record on the way, or when the records
    // would run on past one lap of the ring.
    [[nodiscard]] size_t peek_ahead(std::span<std::byte> out, size_t skip,
                                    RingStatus& status) const noexcept;
    // ioctl(FIONREAD): the unread bytes of the published records, up to the first impossible
    // one (peek_ahead()'s bounds; the read that reaches it reports it). At most size().
    [[nodiscard]] size_t unread_bytes() const noexcept;
    // True when a published record is waiting (acquire load of its length word). A
    // corrupt length counts as data: the next peek() reports it.
    [[nodiscard]] bool has_data() noexcept;

    // After consuming: seq_cst fence, then if the writer armed writer_waiting, clear it
    // and return true: the caller must ring the doorbell.
    [[nodiscard]] bool writer_needs_wakeup() noexcept;
    // Before blocking for data: arm reader_waiting (then re-check has_data()), under the
    // name of the wait (kUnnamedWait: the writer rings in any case).
    void arm(uint64_t wait_id) noexcept;
    void arm() noexcept { arm(wait::kUnnamedWait); }
    bool disarm() noexcept;
    // Whether reader_waiting is still armed: false once a writer took it (and rang), or the
    // reader disarmed it.
    [[nodiscard]] bool armed() const noexcept;

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
    template <class Visit>
    [[nodiscard]] RingStatus walk_published(Visit&& visit) const noexcept;
};

// ---------------------------------------------------------------- inline hot paths

namespace detail {

// A record's length word, written and polled by two processes, hence only ever accessed
// atomically. Records are 8-aligned and the rings page-aligned, so the word is aligned.
inline std::atomic_ref<uint32_t> length_word(std::byte* record) noexcept {
    return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(record));
}

}  // namespace detail

// The reader's position is untrusted: it must never go backwards, never pass what we
// published, and stay record-aligned. Anything else is a corrupt (or hostile) peer.
inline bool RingWriter::refresh_read_pos() noexcept {
    const uint64_t pos = control_->read_pos.load(std::memory_order_acquire);
    if (pos < cached_read_pos_ || pos > write_pos_ || pos % kRecordAlign != 0)
        return false;
    cached_read_pos_ = pos;
    return true;
}

// The last kRecordAlign free bytes are never handed out: the length word of the record
// after the one being written lives there and must be zero when that record is published.
inline size_t RingWriter::payload_that_fits() const noexcept {
    const size_t free = size_ - static_cast<size_t>(write_pos_ - cached_read_pos_);
    const size_t usable = free & ~(kRecordAlign - 1);
    if (usable <= kRecordAlign + kRecordHeaderSize)
        return 0;
    return std::min(usable - kRecordAlign - kRecordHeaderSize, max_record_payload(size_));
}

inline RingStatus RingWriter::reserve(size_t want, std::span<std::byte>& out) noexcept {
    want = std::clamp<size_t>(want, 1, max_record_payload(size_));
    if (payload_that_fits() < want && !refresh_read_pos())
        return RingStatus::Corrupt;
    const size_t n = std::min(want, payload_that_fits());
    if (n == 0)
        return RingStatus::Full;
    // The double mapping makes [offset, offset + footprint) contiguous even across the end.
    std::byte* record = data_ + (write_pos_ & (size_ - 1));
    out = {record + kRecordHeaderSize, n};
    reserved_ = n;
    return RingStatus::Ok;
}

// Zeroes the next record's length word, lets `fill_polled_line` write the payload bytes
// that share a cache line with this record's length word, then publishes the length.
template <class FillPolledLine>
inline void RingWriter::publish(size_t n, FillPolledLine&& fill_polled_line) noexcept {
    std::byte* record = data_ + (write_pos_ & (size_ - 1));
    // The next record's length word still holds whatever an earlier lap left there; it
    // must read 0 before the reader can get to it, i.e. before this record is published.
    detail::length_word(record + record_footprint(n)).store(0, std::memory_order_relaxed);
    // Compiler barrier only: keep the polled line's stores after the ones above.
    std::atomic_signal_fence(std::memory_order_seq_cst);
    fill_polled_line(record + kRecordHeaderSize);
    // Release: the payload and the zero above are visible before the length is.
    detail::length_word(record).store(static_cast<uint32_t>(n), std::memory_order_release);
    write_pos_ += record_footprint(n);
}

inline void RingWriter::commit(size_t n) noexcept {
    n = std::min(n, std::exchange(reserved_, 0));
    if (n > 0)
        publish(n, [](std::byte*) {});
}

// Copies a reserved record's payload in and publishes it, writing the cache line the reader
// is polling (the one holding the length word) last. Filled front to back, that line would
// be stolen back by the polling reader right after its first payload bytes land and would
// cross between the cores again for the length store; written last, its payload bytes and
// length word leave the store buffer together (x86 commits stores in program order).
inline void RingWriter::commit_copy(std::span<const std::byte> payload) noexcept {
    const size_t n = std::min(payload.size(), std::exchange(reserved_, 0));
    if (n == 0)
        return;
    const size_t offset = write_pos_ & (size_ - 1);
    const size_t first_line_end = (offset | (kCacheLine - 1)) + 1;
    const size_t head = std::min(n, first_line_end - offset - kRecordHeaderSize);
    std::byte* payload_area = data_ + offset + kRecordHeaderSize;
    std::memcpy(payload_area + head, payload.data() + head, n - head);
    publish(n, [&](std::byte* polled) { std::memcpy(polled, payload.data(), head); });
}

// Acquire: pairs with the writer's release store of the length, so the payload is
// visible once a non-zero length is.
inline uint32_t RingReader::poll_length() const noexcept {
    return detail::length_word(data_ + (read_pos_ & (size_ - 1))).load(std::memory_order_acquire);
}

inline RingStatus RingReader::peek(std::span<const std::byte>& out) noexcept {
    if (record_length_ == 0) {
        // Read the length once into private memory: the writer may scribble on it later.
        // The bound keeps [record, record + footprint) inside the double mapping; what the
        // payload holds is the writer's business.
        const uint32_t length = poll_length();
        if (length == 0)
            return RingStatus::Empty;
        if (length > max_record_payload(size_))
            return RingStatus::Corrupt;
        record_length_ = length;
    }
    const std::byte* record = data_ + (read_pos_ & (size_ - 1));
    out = {record + kRecordHeaderSize + record_offset_, size_t{record_length_} - record_offset_};
    return RingStatus::Ok;
}

inline void RingReader::consume(size_t n) noexcept {
    if (record_length_ == 0)
        return;
    record_offset_ += static_cast<uint32_t>(std::min<size_t>(n, record_length_ - record_offset_));
    if (record_offset_ < record_length_)
        return;
    read_pos_ += record_footprint(record_length_);
    record_length_ = 0;
    record_offset_ = 0;
    // Release: our reads of the record happen before the writer may reuse its space.
    control_->read_pos.store(read_pos_, std::memory_order_release);
}

// While polling, also pull in the line after the polled one: a small record's payload runs
// on into it, and the writer fills it before the polled line (commit_copy), so fetching
// both lines in the same spin round overlaps the two transfers instead of queueing them.
inline bool RingReader::has_data() noexcept {
    if (record_length_ != 0)
        return true;
    const size_t offset = read_pos_ & (size_ - 1);
    __builtin_prefetch(data_ + (offset | (kCacheLine - 1)) + 1);
    return poll_length() != 0;
}

inline size_t RingWriter::write(std::span<const std::byte> bytes, RingStatus& status) noexcept {
    size_t written = 0;
    status = RingStatus::Ok;
    while (written < bytes.size()) {
        std::span<std::byte> space;
        status = reserve(bytes.size() - written, space);
        if (status != RingStatus::Ok)
            break;
        commit_copy(bytes.subspan(written, space.size()));
        written += space.size();
    }
    if (status == RingStatus::Full && written > 0)
        status = RingStatus::Ok;
    return written;
}

// Visits the published records from the reader's position without consuming anything:
// `visit` gets each one's unread payload (the current record's from the bytes already read
// on) and returns false to stop; Ok, or Corrupt. Each record is bounded as peek()
// bounds it, and the walk stops (Corrupt) before it would pass size() bytes beyond the
// reader's position, which no honest writer can have published: a writer's lengths cannot
// make it run longer than one lap of the ring.
template <class Visit>
inline RingStatus RingReader::walk_published(Visit&& visit) const noexcept {
    uint64_t pos = read_pos_;
    uint32_t length = record_length_;  // 0: not read yet
    uint32_t offset = record_offset_;
    for (;;) {
        std::byte* record = data_ + (pos & (size_ - 1));
        if (length == 0) {
            length = detail::length_word(record).load(std::memory_order_acquire);
            if (length == 0)
                return RingStatus::Ok;
            if (length > max_record_payload(size_) ||
                pos + record_footprint(length) - read_pos_ > size_)
                return RingStatus::Corrupt;
        }
        if (!visit(
                std::span<const std::byte>(record + kRecordHeaderSize + offset, length - offset)))
            return RingStatus::Ok;
        pos += record_footprint(length);
        length = 0;
        offset = 0;
    }
}

// Skips `skip` bytes of the published records, then copies.
inline size_t RingReader::peek_ahead(std::span<std::byte> out, size_t skip,
                                     RingStatus& status) const noexcept {
    size_t copied = 0;
    status = RingStatus::Ok;
    if (out.empty())
        return 0;
    status = walk_published([&](std::span<const std::byte> unread) {
        const size_t skipped = std::min(unread.size(), skip);
        skip -= skipped;
        const size_t n = std::min(unread.size() - skipped, out.size() - copied);
        std::memcpy(out.data() + copied, unread.data() + skipped, n);
        copied += n;
        return copied < out.size();
    });
    if (status != RingStatus::Corrupt)
        status = copied == 0 ? RingStatus::Empty : RingStatus::Ok;
    return copied;
}

inline size_t RingReader::unread_bytes() const noexcept {
    size_t n = 0;
    (void)walk_published([&n](std::span<const std::byte> unread) {
        n += unread.size();
        return true;
    });
    return n;
}

inline size_t RingReader::read(std::span<std::byte> out, RingStatus& status) noexcept {
    size_t copied = 0;
    status = RingStatus::Ok;
    while (copied < out.size()) {
        std::span<const std::byte> data;
        status = peek(data);
        if (status != RingStatus::Ok)
            break;
        const size_t n = std::min(data.size(), out.size() - copied);
        std::memcpy(out.data() + copied, data.data(), n);
        consume(n);
        copied += n;
    }
    if (status == RingStatus::Empty && copied > 0)
        status = RingStatus::Ok;
    return copied;
}

}  // namespace l5pg::shm
