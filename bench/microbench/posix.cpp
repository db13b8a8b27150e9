#include "bench/microbench/posix.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace l5pg::microbench {

void throw_errno(const std::string& what) {
    throw BenchError(what + ": " + std::strerror(errno));
}

FdPair make_socketpair() {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        throw_errno("socketpair");
    return {UniqueFd(sv[0]), UniqueFd(sv[1])};
}

FdPair make_pipe() {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0)
        throw_errno("pipe2");
    return {UniqueFd(p[0]), UniqueFd(p[1])};
}

Mapping::Mapping(size_t bytes, Kind kind) {
    const int flags = MAP_ANONYMOUS | (kind == Kind::Shared ? MAP_SHARED : MAP_PRIVATE);
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (p == MAP_FAILED)
        throw_errno("mmap of " + std::to_string(bytes) + " bytes");
    data_ = static_cast<std::byte*>(p);
    size_ = bytes;
}

Mapping& Mapping::operator=(Mapping&& other) noexcept {
    if (this != &other) {
        reset();
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

void Mapping::reset() noexcept {
    if (data_ != nullptr)
        ::munmap(data_, size_);
    data_ = nullptr;
    size_ = 0;
}

}  // namespace l5pg::microbench
