#include "transport/rdma/buffer.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace l5pg::rdma {

std::optional<Buffer> Buffer::allocate(size_t size, std::string& error) {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    if (size == 0 || size > (size_t{1} << 40)) {
        error = "buffer size out of range";
        return std::nullopt;
    }
    const size_t rounded = (size + page - 1) / page * page;
    void* p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        error = std::string("mmap of ") + std::to_string(rounded) +
                " bytes failed: " + std::strerror(errno);
        return std::nullopt;
    }
    return Buffer(static_cast<std::byte*>(p), rounded);
}

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
    if (this != &other) {
        reset();
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

Buffer::~Buffer() {
    reset();
}

void Buffer::reset() noexcept {
    if (data_ != nullptr)
        ::munmap(data_, size_);
    data_ = nullptr;
    size_ = 0;
}

}  // namespace l5pg::rdma
