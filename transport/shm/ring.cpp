#include "transport/shm/ring.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace l5pg::shm {
namespace {

// A record's length word, written and polled by two processes, hence only ever accessed
// atomically. Records are 8-aligned and the rings page-aligned, so the word is aligned.
std::atomic_ref<uint32_t> length_word(std::byte* record) noexcept {
    return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(record));
}

}  // namespace

const char* to_string(RingStatus status) noexcept {
    switch (status) {
        case RingStatus::Ok:
            return "ok";
        case RingStatus::Empty:
            return "empty";
        case RingStatus::Full:
            return "full";
        case RingStatus::Corrupt:
            return "corrupt";
    }
    return "unknown";
}

// ---------------------------------------------------------------- writer

RingWriter::RingWriter(RingControl& control, std::byte* data, size_t size) noexcept
    : control_(&control), data_(data), size_(size) {}

// The reader's position is untrusted: it must never go backwards, never pass what we
// published, and stay record-aligned. Anything else is a corrupt (or hostile) peer.
bool RingWriter::refresh_read_pos() noexcept {
    const uint64_t pos = control_->read_pos.load(std::memory_order_acquire);
    if (pos < cached_read_pos_ || pos > write_pos_ || pos % kRecordAlign != 0)
        return false;
    cached_read_pos_ = pos;
    return true;
}

// The last kRecordAlign free bytes are never handed out: the length word of the record
// after the one being written lives there and must be zero when that record is published.
size_t RingWriter::payload_that_fits() const noexcept {
    const size_t free = size_ - static_cast<size_t>(write_pos_ - cached_read_pos_);
    const size_t usable = free & ~(kRecordAlign - 1);
    if (usable <= kRecordAlign + kRecordHeaderSize)
        return 0;
    return std::min(usable - kRecordAlign - kRecordHeaderSize, max_record_payload(size_));
}

RingStatus RingWriter::reserve(size_t want, std::span<std::byte>& out) noexcept {
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

void RingWriter::commit(size_t n) noexcept {
    n = std::min(n, reserved_);
    reserved_ = 0;
    if (n == 0)
        return;
    std::byte* record = data_ + (write_pos_ & (size_ - 1));
    // The next record's length word still holds whatever an earlier lap left there; it
    // must read 0 before the reader can get to it, i.e. before this record is published.
    length_word(record + record_footprint(n)).store(0, std::memory_order_relaxed);
    // Release: the payload and the zero above are visible before the length is.
    length_word(record).store(static_cast<uint32_t>(n), std::memory_order_release);
    write_pos_ += record_footprint(n);
}

size_t RingWriter::write(std::span<const std::byte> bytes, RingStatus& status) noexcept {
    size_t written = 0;
    status = RingStatus::Ok;
    while (written < bytes.size()) {
        std::span<std::byte> space;
        status = reserve(bytes.size() - written, space);
        if (status != RingStatus::Ok)
            break;
        std::memcpy(space.data(), bytes.data() + written, space.size());
        commit(space.size());
        written += space.size();
    }
    if (status == RingStatus::Full && written > 0)
        status = RingStatus::Ok;
    return written;
}

size_t RingWriter::free_bytes() noexcept {
    if (!refresh_read_pos())
        return 0;
    return payload_that_fits();
}

bool RingWriter::empty() noexcept {
    return refresh_read_pos() && cached_read_pos_ == write_pos_;
}

// Dekker with RingReader::arm(): our store of the length word, fence, read of the flag;
// the reader's flag store, fence, read of the length word. One of the two sees the other.
bool RingWriter::reader_needs_wakeup() noexcept {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (control_->reader_waiting.load(std::memory_order_relaxed) == 0)
        return false;
    return control_->reader_waiting.exchange(0, std::memory_order_acq_rel) != 0;
}

void RingWriter::arm() noexcept {
    control_->writer_waiting.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool RingWriter::disarm() noexcept {
    return control_->writer_waiting.exchange(0, std::memory_order_acq_rel) != 0;
}

// ---------------------------------------------------------------- reader

RingReader::RingReader(RingControl& control, std::byte* data, size_t size) noexcept
    : control_(&control), data_(data), size_(size) {}

// Acquire: pairs with the writer's release store of the length, so the payload is
// visible once a non-zero length is.
uint32_t RingReader::poll_length() const noexcept {
    return length_word(data_ + (read_pos_ & (size_ - 1))).load(std::memory_order_acquire);
}

RingStatus RingReader::peek(std::span<const std::byte>& out) noexcept {
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

void RingReader::consume(size_t n) noexcept {
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

size_t RingReader::read(std::span<std::byte> out, RingStatus& status) noexcept {
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

bool RingReader::has_data() noexcept {
    return record_length_ != 0 || poll_length() != 0;
}

bool RingReader::writer_needs_wakeup() noexcept {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (control_->writer_waiting.load(std::memory_order_relaxed) == 0)
        return false;
    return control_->writer_waiting.exchange(0, std::memory_order_acq_rel) != 0;
}

void RingReader::arm() noexcept {
    control_->reader_waiting.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool RingReader::disarm() noexcept {
    return control_->reader_waiting.exchange(0, std::memory_order_acq_rel) != 0;
}

}  // namespace l5pg::shm
