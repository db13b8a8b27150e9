#include "daemon/cancel_keys.hpp"

#include <utility>

#include "daemon/secure_random.hpp"

namespace l5pg::daemon {
namespace {

// Longer than any window asked about (cancelled_within()).
constexpr std::chrono::seconds kCancelMemory{60};
// A cancel not confirmed (InFlight::confirm()) sits in the postmaster's accept queue at worst:
// a postmaster that takes it later than this has stalled far beyond any client's patience.
constexpr std::chrono::hours kDoubtMemory{1};

}  // namespace

CancelKeys::Handle::Handle(Handle&& other) noexcept
    : keys_(std::exchange(other.keys_, nullptr)), release_(other.release_), id_(other.id_) {}

CancelKeys::Handle& CancelKeys::Handle::operator=(Handle&& other) noexcept {
    if (this != &other) {
        release();
        keys_ = std::exchange(other.keys_, nullptr);
        release_ = other.release_;
        id_ = other.id_;
    }
    return *this;
}

CancelKeys::Handle::~Handle() {
    release();
}

void CancelKeys::Handle::release() noexcept {
    if (keys_ != nullptr)
        (keys_->*release_)(id_);
    keys_ = nullptr;
}

CancelKeys::Lease CancelKeys::issue(const Backend& backend) {
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

CancelKeys::Lease CancelKeys::serve(const Backend& backend) {
    const std::lock_guard lock(mutex_);
    if (!backends_.emplace(pack(backend.key), backend).second)
        return Lease();
    return Lease(this, backend.key);
}

std::optional<CancelKeys::Translation> CancelKeys::backend_for(protocol::CancelKey client_key) {
    const std::lock_guard lock(mutex_);
    const auto found = backends_.find(pack(client_key));
    if (found == backends_.end())
        return std::nullopt;
    const auto now = clock::now();
    std::erase_if(cancelled_, [now](const auto& e) {
        return e.second.in_flight == 0 && now - e.second.settled > kCancelMemory &&
               now >= e.second.doubtful;
    });
    ++cancelled_[pack(found->second.key)].in_flight;
    return Translation{found->second, InFlight(this, found->second.key)};
}

bool CancelKeys::cancelled_within(protocol::CancelKey backend, clock::duration window) const {
    const std::lock_guard lock(mutex_);
    const auto found = cancelled_.find(pack(backend));
    if (found == cancelled_.end())
        return false;
    const auto now = clock::now();
    return found->second.in_flight > 0 || now - found->second.settled <= window ||
           now < found->second.doubtful;
}

size_t CancelKeys::size() const {
    const std::lock_guard lock(mutex_);
    return backends_.size();
}

void CancelKeys::withdraw(uint64_t client_key) noexcept {
    const std::lock_guard lock(mutex_);
    backends_.erase(client_key);
}

void CancelKeys::settle(uint64_t backend) noexcept {
    settle_as(backend, /*in_doubt=*/false);
}

void CancelKeys::settle_in_doubt(uint64_t backend) noexcept {
    settle_as(backend, /*in_doubt=*/true);
}

void CancelKeys::settle_as(uint64_t backend, bool in_doubt) noexcept {
    const std::lock_guard lock(mutex_);
    Cancels& cancels = cancelled_[backend];
    --cancels.in_flight;
    cancels.settled = clock::now();
    if (in_doubt)
        cancels.doubtful = cancels.settled + kDoubtMemory;
}

}  // namespace l5pg::daemon
