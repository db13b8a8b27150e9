// RAII owners of file descriptors and memory mappings, and the benchmark's error type.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "transport/unique_fd.hpp"

namespace l5pg::microbench {

// A failed measurement or setup step; the cell is reported as failed.
class BenchError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// Throws BenchError("<what>: <strerror(errno)>").
[[noreturn]] void throw_errno(const std::string& what);

using UniqueFd = l5pg::UniqueFd;

// Both ends of a socketpair(2) or pipe(2).
struct FdPair {
    UniqueFd a;  // socketpair: sv[0]; pipe: read end
    UniqueFd b;  // socketpair: sv[1]; pipe: write end
};

[[nodiscard]] FdPair make_socketpair();  // AF_UNIX, SOCK_STREAM, CLOEXEC
[[nodiscard]] FdPair make_pipe();        // CLOEXEC

// An anonymous mapping: MAP_SHARED is inherited across fork() as the same memory.
class Mapping {
  public:
    enum class Kind { Private, Shared };

    Mapping() = default;
    Mapping(size_t bytes, Kind kind);  // zero-filled; throws BenchError
    Mapping(Mapping&& other) noexcept
        : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
    Mapping& operator=(Mapping&& other) noexcept;
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;
    ~Mapping() { reset(); }

    [[nodiscard]] std::byte* data() const noexcept { return data_; }
    [[nodiscard]] size_t size() const noexcept { return size_; }
    void reset() noexcept;

  private:
    std::byte* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace l5pg::microbench
