// RAII owner of one session's shared-memory segment: the memfd and the double-mapped
// address range. The client creates it, the server attaches to the passed fd.
// No exceptions: this code also runs inside the LD_PRELOAD shim.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "transport/shm/layout.hpp"

namespace l5pg::shm {

struct SysError {
    int err = 0;                 // errno value, or 0 for a validation failure
    const char* what = nullptr;  // static string naming the failed step
};

// Whether this kernel lets the server seal a segment as attach() must (F_SEAL_FUTURE_WRITE,
// Linux 5.1): without it every upgrade is declined. Tried on a memfd of its own.
[[nodiscard]] bool server_seals_supported() noexcept;

class Segment {
  public:
    // Client: memfd_create(MFD_CLOEXEC|MFD_ALLOW_SEALING), ftruncate, fallocate every page,
    // seal SHRINK|GROW, map, write the header fields. Sizes must be valid_ring_size().
    [[nodiscard]] static std::optional<Segment> create(size_t c2s_size, size_t s2c_size,
                                                       SysError& error) noexcept;
    // Server: takes ownership of `fd` (closed on failure too). Verifies F_GET_SEALS has
    // SHRINK and GROW but not SEAL, FUTURE_WRITE or WRITE, fstat size == kHeaderSize + c2s +
    // s2c, maps it, seals FUTURE_WRITE|SEAL (no hole punching from then on), then verifies
    // that every page is allocated and the header's magic/version/sizes match the request.
    [[nodiscard]] static std::optional<Segment> attach(int fd, size_t c2s_size, size_t s2c_size,
                                                       SysError& error) noexcept;

    Segment(Segment&& other) noexcept;
    Segment& operator=(Segment&& other) noexcept;
    Segment(const Segment&) = delete;
    Segment& operator=(const Segment&) = delete;
    ~Segment();

    [[nodiscard]] int fd() const noexcept { return fd_; }
    [[nodiscard]] Header& header() const noexcept;
    [[nodiscard]] std::byte* c2s_data() const noexcept;  // 2 * c2s_size() bytes mapped
    [[nodiscard]] std::byte* s2c_data() const noexcept;  // 2 * s2c_size() bytes mapped
    [[nodiscard]] size_t c2s_size() const noexcept { return c2s_size_; }
    [[nodiscard]] size_t s2c_size() const noexcept { return s2c_size_; }

    // Unmaps without touching the shared contents, closes the fd (e.g. in a forked child).
    void reset() noexcept;
    // Closes the memfd and keeps the mapping: the client's, once the server has its own
    // descriptor (a descriptor the program does not know of must not outlive the handshake:
    // the program may close its number and reuse it, and reset() would close that).
    void close_fd() noexcept;

  private:
    Segment(int fd, std::byte* base, size_t reserved, size_t c2s, size_t s2c) noexcept;

    int fd_ = -1;
    std::byte* base_ = nullptr;
    size_t reserved_ = 0;  // length of the whole reserved address range
    size_t c2s_size_ = 0;
    size_t s2c_size_ = 0;
};

}  // namespace l5pg::shm
