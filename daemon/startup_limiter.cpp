#include "daemon/startup_limiter.hpp"

#include <utility>

namespace l5pg::daemon {

StartupLimiter::Slot::Slot(Slot&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)), key_(std::move(other.key_)) {}

StartupLimiter::Slot& StartupLimiter::Slot::operator=(Slot&& other) noexcept {
    if (this != &other) {
        release();
        owner_ = std::exchange(other.owner_, nullptr);
        key_ = std::move(other.key_);
    }
    return *this;
}

void StartupLimiter::Slot::release() noexcept {
    if (owner_ != nullptr)
        std::exchange(owner_, nullptr)->give_back(key_);
}

StartupLimiter::Slot StartupLimiter::try_acquire(const std::string& peer_key, Refusal& refusal) {
    std::lock_guard lock(mutex_);
    refusal = Refusal::None;
    if (total_ >= max_total_) {
        refusal = Refusal::Total;
        return {};
    }
    unsigned& mine = per_peer_[peer_key];
    if (mine >= max_per_peer_) {
        refusal = Refusal::PerPeer;
        return {};
    }
    ++mine;
    ++total_;
    return Slot(this, peer_key);
}

unsigned StartupLimiter::in_startup() const {
    std::lock_guard lock(mutex_);
    return total_;
}

void StartupLimiter::set_caps(unsigned max_total, unsigned max_per_peer) {
    std::lock_guard lock(mutex_);
    max_total_ = max_total;
    max_per_peer_ = max_per_peer;
}

void StartupLimiter::give_back(const std::string& peer_key) noexcept {
    std::lock_guard lock(mutex_);
    --total_;
    auto it = per_peer_.find(peer_key);
    if (it != per_peer_.end() && --it->second == 0)
        per_peer_.erase(it);
}

}  // namespace l5pg::daemon
