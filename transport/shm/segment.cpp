#include "transport/shm/segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <new>
#include <utility>

namespace l5pg::shm {
namespace {

// What the client seals before passing the memfd: without these the client could shrink
// the file under l5pgd and make its next access to the mapping raise SIGBUS.
constexpr int kRequiredSeals = F_SEAL_SHRINK | F_SEAL_GROW;
// What l5pgd adds once it has mapped the memfd, so the client must leave them to it:
// FUTURE_WRITE refuses hole punching (fallocate, MADV_REMOVE) and new writable mappings,
// while the two existing mappings keep working; SEAL keeps it that way.
constexpr int kServerSeals = F_SEAL_FUTURE_WRITE | F_SEAL_SEAL;

size_t total_size(size_t c2s, size_t s2c) noexcept {
    return kHeaderSize + c2s + s2c;
}

bool fail(SysError& error, const char* what, int err) noexcept {
    error.what = what;
    error.err = err;
    return false;
}

// Maps `size` bytes of `fd` at `offset` twice, back to back at `addr`, so that any record
// starting inside the ring can be read or written contiguously (L5 Fig. 5).
bool map_ring_twice(int fd, std::byte* addr, size_t offset, size_t size) noexcept {
    for (int copy = 0; copy < 2; ++copy) {
        void* p = ::mmap(addr + copy * size, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                         fd, static_cast<off_t>(offset));
        if (p == MAP_FAILED)
            return false;
    }
    return true;
}

// Reserves one address range, then maps the header once and each ring twice into it.
std::byte* map_segment(int fd, size_t c2s, size_t s2c, size_t& reserved, SysError& error) noexcept {
    reserved = kHeaderSize + 2 * c2s + 2 * s2c;
    void* range =
        ::mmap(nullptr, reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (range == MAP_FAILED) {
        fail(error, "mmap (reserve address range)", errno);
        return nullptr;
    }
    auto* base = static_cast<std::byte*>(range);
    const bool ok = ::mmap(base, kHeaderSize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
                           0) != MAP_FAILED &&
                    map_ring_twice(fd, base + kHeaderSize, kHeaderSize, c2s) &&
                    map_ring_twice(fd, base + kHeaderSize + 2 * c2s, kHeaderSize + c2s, s2c);
    if (!ok) {
        fail(error, "mmap (shared memory segment)", errno);
        ::munmap(base, reserved);
        return nullptr;
    }
    return base;
}

bool verify_seals_and_size(int fd, size_t c2s, size_t s2c, SysError& error) noexcept {
    const int seals = ::fcntl(fd, F_GET_SEALS);
    if (seals < 0)
        return fail(error, "passed fd is not a sealable memfd (F_GET_SEALS)", errno);
    if ((seals & kRequiredSeals) != kRequiredSeals)
        return fail(error, "memfd is not sealed against shrinking and growing", 0);
    if ((seals & (F_SEAL_SEAL | F_SEAL_FUTURE_WRITE | F_SEAL_WRITE)) != 0)
        return fail(error,
                    "memfd is already sealed against writing or further seals (a memfd serves "
                    "one session; a libl5pg older than l5pgd seals it itself)",
                    0);
    struct stat st {};
    if (::fstat(fd, &st) != 0)
        return fail(error, "fstat of the memfd", errno);
    if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != total_size(c2s, s2c))
        return fail(error, "memfd size does not match the requested ring sizes", 0);
    return true;
}

// Shared-memory pages are charged to the memory cgroup of the process that first touches
// them. The client writes every page of the segment before passing it (create()), so l5pgd,
// which then seals the memfd against hole punching, is never charged for a client's rings,
// during its session or after, for as long as the client keeps the memfd.
bool seal_and_check_pages(int fd, size_t c2s, size_t s2c, SysError& error) noexcept {
    if (::fcntl(fd, F_ADD_SEALS, kServerSeals) != 0)
        return fail(error, "sealing the memfd against new writers (F_SEAL_FUTURE_WRITE)", errno);
    // Checked after sealing, so no hole can appear once it has passed. SEEK_HOLE, not
    // st_blocks: tmpfs reports a page that was allocated but never written (fallocate) as
    // a hole, and st_blocks can be made up elsewhere (a huge page faulted beyond the rings).
    // (The offset moved is the client's too: it never reads or writes the memfd itself.)
    const off_t hole = ::lseek(fd, 0, SEEK_HOLE);
    if (hole < 0)
        return fail(error, "lseek(SEEK_HOLE) on the memfd", errno);
    if (static_cast<uint64_t>(hole) < total_size(c2s, s2c))
        return fail(error,
                    "memfd has pages the client did not allocate (it must write every page of "
                    "the segment before passing it)",
                    0);
    return true;
}

// The client's own pages, charged to it: fallocate() takes them (ENOSPC at a memory limit,
// rather than a fault later) and a write to each makes them data (seal_and_check_pages()).
// Through the first mapping of each part (map_segment()): the header, then each ring.
bool allocate_pages(int fd, std::byte* base, size_t c2s, size_t s2c) noexcept {
    constexpr size_t kSmallestPage = 4096;
    if (::fallocate(fd, 0, 0, static_cast<off_t>(total_size(c2s, s2c))) != 0)
        return false;
    const std::pair<std::byte*, size_t> parts[] = {
        {base, kHeaderSize}, {base + kHeaderSize, c2s}, {base + kHeaderSize + 2 * c2s, s2c}};
    for (const auto& [start, size] : parts)
        for (size_t offset = 0; offset < size; offset += kSmallestPage)
            start[offset] = std::byte{0};
    return true;
}

// The header was written by the client: copy each field once, then compare.
bool verify_header(const Header& header, size_t c2s, size_t s2c, SysError& error) noexcept {
    const uint64_t magic = header.magic;
    const uint32_t version = header.version;
    const uint32_t header_size = header.header_size;
    const uint64_t c2s_size = header.c2s_size;
    const uint64_t s2c_size = header.s2c_size;
    if (magic != kMagic)
        return fail(error, "bad magic in the segment header", 0);
    if (version != kLayoutVersion)
        return fail(error, "unsupported segment layout version", 0);
    if (header_size != kHeaderSize || c2s_size != c2s || s2c_size != s2c)
        return fail(error, "segment header sizes do not match the upgrade request", 0);
    return true;
}

}  // namespace

bool server_seals_supported() noexcept {
    const int fd = ::memfd_create("l5pg-seal-probe", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return false;
    const bool ok = ::fcntl(fd, F_ADD_SEALS, kServerSeals) == 0;
    ::close(fd);
    return ok;
}

Segment::Segment(int fd, std::byte* base, size_t reserved, size_t c2s, size_t s2c) noexcept
    : fd_(fd), base_(base), reserved_(reserved), c2s_size_(c2s), s2c_size_(s2c) {}

std::optional<Segment> Segment::create(size_t c2s_size, size_t s2c_size, SysError& error) noexcept {
    if (!valid_ring_size(c2s_size) || !valid_ring_size(s2c_size)) {
        fail(error, "ring size must be a power of two between 4 KiB and 256 MiB", EINVAL);
        return std::nullopt;
    }
    const int fd = ::memfd_create("l5pg-session", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        fail(error, "memfd_create", errno);
        return std::nullopt;
    }
    // The server adds the rest of the seals once it has mapped the segment.
    const size_t total = total_size(c2s_size, s2c_size);
    if (::ftruncate(fd, static_cast<off_t>(total)) != 0 ||
        ::fcntl(fd, F_ADD_SEALS, kRequiredSeals) != 0) {
        fail(error, "sizing and sealing the memfd", errno);
        ::close(fd);
        return std::nullopt;
    }
    size_t reserved = 0;
    std::byte* base = map_segment(fd, c2s_size, s2c_size, reserved, error);
    if (base == nullptr) {
        ::close(fd);
        return std::nullopt;
    }
    if (!allocate_pages(fd, base, c2s_size, s2c_size)) {
        fail(error, "allocating the memfd's pages", errno);
        ::munmap(base, reserved);
        ::close(fd);
        return std::nullopt;
    }
    // A fresh memfd is zero-filled: every atomic starts at 0 (positions, flags).
    Header& header = *reinterpret_cast<Header*>(base);
    header.magic = kMagic;
    header.version = kLayoutVersion;
    header.header_size = kHeaderSize;
    header.c2s_size = c2s_size;
    header.s2c_size = s2c_size;
    return Segment(fd, base, reserved, c2s_size, s2c_size);
}

std::optional<Segment> Segment::attach(int fd, size_t c2s_size, size_t s2c_size,
                                       SysError& error) noexcept {
    if (!valid_ring_size(c2s_size) || !valid_ring_size(s2c_size)) {
        fail(error, "requested ring size is not a power of two between 4 KiB and 256 MiB", 0);
        ::close(fd);
        return std::nullopt;
    }
    size_t reserved = 0;
    std::byte* base = nullptr;
    if (verify_seals_and_size(fd, c2s_size, s2c_size, error))
        base = map_segment(fd, c2s_size, s2c_size, reserved, error);
    if (base != nullptr &&
        (!seal_and_check_pages(fd, c2s_size, s2c_size, error) ||
         !verify_header(*reinterpret_cast<const Header*>(base), c2s_size, s2c_size, error))) {
        ::munmap(base, reserved);
        base = nullptr;
    }
    if (base == nullptr) {
        ::close(fd);
        return std::nullopt;
    }
    return Segment(fd, base, reserved, c2s_size, s2c_size);
}

Segment::Segment(Segment&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      base_(std::exchange(other.base_, nullptr)),
      reserved_(std::exchange(other.reserved_, 0)),
      c2s_size_(other.c2s_size_),
      s2c_size_(other.s2c_size_) {}

Segment& Segment::operator=(Segment&& other) noexcept {
    if (this != &other) {
        reset();
        fd_ = std::exchange(other.fd_, -1);
        base_ = std::exchange(other.base_, nullptr);
        reserved_ = std::exchange(other.reserved_, 0);
        c2s_size_ = other.c2s_size_;
        s2c_size_ = other.s2c_size_;
    }
    return *this;
}

Segment::~Segment() {
    reset();
}

void Segment::reset() noexcept {
    if (base_ != nullptr)
        ::munmap(base_, reserved_);
    if (fd_ >= 0)
        ::close(fd_);
    base_ = nullptr;
    fd_ = -1;
    reserved_ = 0;
}

void Segment::close_fd() noexcept {
    if (fd_ >= 0)
        ::close(fd_);
    fd_ = -1;
}

Header& Segment::header() const noexcept {
    return *reinterpret_cast<Header*>(base_);
}
std::byte* Segment::c2s_data() const noexcept {
    return base_ + kHeaderSize;
}
std::byte* Segment::s2c_data() const noexcept {
    return base_ + kHeaderSize + 2 * c2s_size_;
}

}  // namespace l5pg::shm
