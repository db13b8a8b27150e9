// FIFO of bytes waiting to be written to a socket (or an RDMA channel). Consumed from the
// front, appended at the back.
//
// Storage is bounded by what is queued, whatever the reader's pace: a reader that never
// lets the queue run empty (a slow client of a large result) must not make it grow with
// every byte that ever passed through it. Before the tail grows, the unconsumed bytes
// move to the start once the consumed front is at least as large as they are (each byte
// moves at most once per byte consumed before it: amortised O(1)). When storage must grow,
// the consumed front goes first (a reallocation would copy it too) and storage grows to
// twice what is queued plus what is asked, so that it settles instead of reallocating (and
// copying the whole queue) at every prepare(). So a queue that holds at most L bytes before
// each prepare(n) / append(n) never has more than 2 * L + n bytes of storage (docs in
// config/l5pgd.example.yaml, limits.session_buffer_bytes).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <utility>
#include <vector>

namespace l5pg::daemon {

// An allocator whose value-less construct() leaves the bytes as they are: prepare(n)
// grows the vector by n bytes that recv() is about to overwrite, and zeroing them first
// cost a 64 KiB memset per read (38 % of l5pgd's CPU with 8 RDMA clients polling).
template <class T>
struct UninitializedAllocator : std::allocator<T> {
    using value_type = T;
    template <class U>
    struct rebind {
        using other = UninitializedAllocator<U>;
    };
    UninitializedAllocator() noexcept = default;
    template <class U>
    explicit UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
    template <class U>
    void construct(U* p) noexcept {
        ::new (static_cast<void*>(p)) U;  // default-initialisation: no write for std::byte
    }
    template <class U, class... Args>
    void construct(U* p, Args&&... args) {
        ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
};

class ByteQueue {
  public:
    [[nodiscard]] bool empty() const noexcept { return head_ == data_.size(); }
    [[nodiscard]] size_t size() const noexcept { return data_.size() - head_; }
    // Bytes of storage held (for tests and the bound above).
    [[nodiscard]] size_t capacity() const noexcept { return data_.capacity(); }
    [[nodiscard]] std::span<const std::byte> front() const noexcept {
        return {data_.data() + head_, size()};
    }
    void append(std::span<const std::byte> bytes) {
        make_room(bytes.size());
        data_.insert(data_.end(), bytes.begin(), bytes.end());
    }
    // Grows the tail by up to `n` bytes for a recv() to fill; commit what was filled.
    [[nodiscard]] std::span<std::byte> prepare(size_t n) {
        make_room(n);
        tail_mark_ = data_.size();
        data_.resize(tail_mark_ + n);
        return {data_.data() + tail_mark_, n};
    }
    void commit(size_t filled) noexcept { data_.resize(tail_mark_ + filled); }
    void consume(size_t n) noexcept {
        head_ += n;
        if (head_ == data_.size())
            clear();
    }
    void clear() noexcept {
        data_.clear();
        head_ = 0;
    }

  private:
    // Compacts and grows as the top of the file says (std::vector's own growth doubles
    // what it holds, consumed front included, which breaks the bound).
    void make_room(size_t n) {
        if (head_ > 0 && (head_ >= size() || data_.size() + n > data_.capacity()))
            compact();
        if (data_.size() + n > data_.capacity())
            data_.reserve(2 * data_.size() + n);
    }
    void compact() noexcept {
        const size_t live = size();
        std::memmove(data_.data(), data_.data() + head_, live);
        data_.resize(live);
        head_ = 0;
    }

    std::vector<std::byte, UninitializedAllocator<std::byte>> data_;
    size_t head_ = 0;
    size_t tail_mark_ = 0;
};

}  // namespace l5pg::daemon
