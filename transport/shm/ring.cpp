#include "transport/shm/ring.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace l5pg::shm {

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

size_t RingWriter::free_bytes() noexcept {
    if (!refresh_read_pos())
        return 0;
    return payload_that_fits();
}

RingStatus RingWriter::room() noexcept {
    if (!refresh_read_pos())
        return RingStatus::Corrupt;
    return payload_that_fits() > 0 ? RingStatus::Ok : RingStatus::Full;
}

bool RingWriter::empty() noexcept {
    return refresh_read_pos() && cached_read_pos_ == write_pos_;
}

// Dekker with RingReader::arm(): our store of the length word, fence, read of the flag;
// the reader's flag store, fence, read of the length word. One of the two sees the other.
bool RingWriter::reader_needs_wakeup(uint64_t& wait_id) noexcept {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (control_->reader_waiting.load(std::memory_order_relaxed) == 0)
        return false;
    if (control_->reader_waiting.exchange(0, std::memory_order_acq_rel) == 0)
        return false;
    // The flag we took was stored (release) after its name: this reads that name or the one
    // of a later arming, whose wait includes this ring too.
    wait_id = control_->reader_wait_id.load(std::memory_order_relaxed);
    return true;
}

void RingWriter::arm() noexcept {
    control_->writer_waiting.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool RingWriter::disarm() noexcept {
    return control_->writer_waiting.exchange(0, std::memory_order_acq_rel) != 0;
}

bool RingWriter::armed() const noexcept {
    return control_->writer_waiting.load(std::memory_order_acquire) != 0;
}

// ---------------------------------------------------------------- reader

RingReader::RingReader(RingControl& control, std::byte* data, size_t size) noexcept
    : control_(&control), data_(data), size_(size) {}

bool RingReader::writer_needs_wakeup() noexcept {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (control_->writer_waiting.load(std::memory_order_relaxed) == 0)
        return false;
    return control_->writer_waiting.exchange(0, std::memory_order_acq_rel) != 0;
}

void RingReader::arm(uint64_t wait_id) noexcept {
    control_->reader_wait_id.store(wait_id, std::memory_order_relaxed);
    // Release: a writer that takes the flag reads this name, not an older one.
    control_->reader_waiting.store(1, std::memory_order_release);
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool RingReader::disarm() noexcept {
    return control_->reader_waiting.exchange(0, std::memory_order_acq_rel) != 0;
}

bool RingReader::armed() const noexcept {
    return control_->reader_waiting.load(std::memory_order_acquire) != 0;
}

}  // namespace l5pg::shm
