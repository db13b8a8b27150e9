// RAII owner of a page-aligned, zero-filled anonymous mapping: the memory behind every
// region the RDMA channel registers (rings, control blocks, staging, mailboxes).
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace l5pg::rdma {

class Buffer {
  public:
    // `size` is rounded up to whole pages. nullopt (and `error`) when mmap fails.
    [[nodiscard]] static std::optional<Buffer> allocate(size_t size, std::string& error);

    Buffer() = default;
    Buffer(Buffer&& other) noexcept;
    Buffer& operator=(Buffer&& other) noexcept;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    ~Buffer();

    [[nodiscard]] std::byte* data() const noexcept { return data_; }
    [[nodiscard]] size_t size() const noexcept { return size_; }

  private:
    Buffer(std::byte* data, size_t size) noexcept : data_(data), size_(size) {}
    void reset() noexcept;

    std::byte* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace l5pg::rdma
