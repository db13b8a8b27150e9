// FIFO of bytes waiting to be written to a socket. Consumed from the front, appended at
// the back; storage is compacted when the front is drained.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace l5pg::daemon {

class ByteQueue {
  public:
    [[nodiscard]] bool empty() const noexcept { return head_ == data_.size(); }
    [[nodiscard]] size_t size() const noexcept { return data_.size() - head_; }
    [[nodiscard]] std::span<const std::byte> front() const noexcept {
        return {data_.data() + head_, size()};
    }
    void append(std::span<const std::byte> bytes) {
        data_.insert(data_.end(), bytes.begin(), bytes.end());
    }
    // Grows the tail by up to `n` bytes for a recv() to fill; commit what was filled.
    [[nodiscard]] std::span<std::byte> prepare(size_t n) {
        tail_mark_ = data_.size();
        data_.resize(tail_mark_ + n);
        return {data_.data() + tail_mark_, n};
    }
    void commit(size_t filled) noexcept { data_.resize(tail_mark_ + filled); }
    void consume(size_t n) noexcept {
        head_ += n;
        if (head_ == data_.size()) {
            data_.clear();
            head_ = 0;
        }
    }
    void clear() noexcept {
        data_.clear();
        head_ = 0;
    }

  private:
    std::vector<std::byte> data_;
    size_t head_ = 0;
    size_t tail_mark_ = 0;
};

}  // namespace l5pg::daemon
