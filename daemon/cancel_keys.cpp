#include "daemon/cancel_keys.hpp"

#include <utility>

#include "daemon/secure_random.hpp"

namespace l5pg::daemon {
namespace {

// Longer than any window asked about (cancelled_within()).
constexpr std::chrono::seconds kCancelMemory{60};

}  // namespace

CancelKeys::Lease::Lease(Lease&& other) noexcept
    : keys_(std::exchange(other.keys_, nullptr)), key_(other.key_) {}

CancelKeys::Lease& CancelKeys::Lease::operator=(Lease&& other) noexcept {
    if (this != &other) {
        if (keys_ != nullptr)
            keys_->withdraw(key_);
        keys_ = std::exchange(other.keys_, nullptr);
        key_ = other.key_;
    }
    return *this;
}

CancelKeys::Lease::~Lease() {
    if (keys_ != nullptr)
        keys_->withdraw(key_);
}

CancelKeys::Lease CancelKeys::issue(protocol::CancelKey backend) {
    for (;;) {
        const uint64_t bits = secure_random64();
        // libpq reads the pid as a signed int32: keep it positive and non-zero.
        const protocol::CancelKey key{static_cast<uint32_t>(bits >> 33) | 1u,
                                      static_cast<uint32_t>(bits)};
        const std::lock_guard lock(mutex_);
        if (backends_.emplace(pack(key), backend).second)
            return Lease(this, key);
    }
}

std::optional<protocol::CancelKey> CancelKeys::backend_for(protocol::CancelKey client_key) {
    const std::lock_guard lock(mutex_);
    const auto found = backends_.find(pack(client_key));
    if (found == backends_.end())
        return std::nullopt;
    const auto now = std::chrono::steady_clock::now();
    std::erase_if(cancelled_, [now](const auto& e) { return now - e.second > kCancelMemory; });
    cancelled_[pack(found->second)] = now;
    return found->second;
}

bool CancelKeys::cancelled_within(protocol::CancelKey backend,
                                  std::chrono::steady_clock::duration window) const {
    const std::lock_guard lock(mutex_);
    const auto found = cancelled_.find(pack(backend));
    return found != cancelled_.end() && std::chrono::steady_clock::now() - found->second <= window;
}

size_t CancelKeys::size() const {
    const std::lock_guard lock(mutex_);
    return backends_.size();
}

void CancelKeys::withdraw(protocol::CancelKey key) noexcept {
    const std::lock_guard lock(mutex_);
    backends_.erase(pack(key));
}

}  // namespace l5pg::daemon
