#include "daemon/segment_registry.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

namespace l5pg::daemon {

SegmentRegistry::Claim::Claim(Claim&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)), key_(other.key_) {}

SegmentRegistry::Claim& SegmentRegistry::Claim::operator=(Claim&& other) noexcept {
    if (this != &other) {
        release();
        owner_ = std::exchange(other.owner_, nullptr);
        key_ = other.key_;
    }
    return *this;
}

void SegmentRegistry::Claim::release() noexcept {
    if (owner_ != nullptr)
        std::exchange(owner_, nullptr)->remove(key_);
}

std::optional<SegmentRegistry::Claim> SegmentRegistry::claim(int fd, uint64_t session_id,
                                                             Refusal& refusal) {
    // Seals first: a memfd's are read without its file system, while fstat() of a file on a
    // FUSE mount waits for the client's own server to answer (foreign_fds.hpp).
    if (::fcntl(fd, F_GET_SEALS) < 0) {
        refusal = Refusal{0, "F_GET_SEALS", errno};
        return std::nullopt;
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        refusal = Refusal{0, "fstat", errno};
        return std::nullopt;
    }
    const Key key{st.st_dev, st.st_ino};
    std::lock_guard lock(mutex_);
    const auto [it, inserted] = attached_.emplace(key, session_id);
    if (!inserted) {
        refusal = Refusal{it->second, "", 0};
        return std::nullopt;
    }
    return Claim(this, key);
}

size_t SegmentRegistry::size() const {
    std::lock_guard lock(mutex_);
    return attached_.size();
}

void SegmentRegistry::remove(const Key& key) noexcept {
    std::lock_guard lock(mutex_);
    attached_.erase(key);
}

}  // namespace l5pg::daemon
