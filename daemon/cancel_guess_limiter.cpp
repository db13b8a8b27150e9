#include "daemon/cancel_guess_limiter.hpp"

#include <algorithm>
#include <iterator>

namespace l5pg::daemon {

CancelGuessLimiter::CancelGuessLimiter(unsigned total_per_second, unsigned per_peer_per_second)
    : total_rate_(total_per_second),
      peer_rate_(per_peer_per_second),
      total_{static_cast<double>(total_per_second), clock::time_point::min()} {}

void CancelGuessLimiter::fill(Bucket& bucket, unsigned rate, clock::time_point now) noexcept {
    if (bucket.filled == clock::time_point::min()) {
        bucket.filled = now;
        return;
    }
    // `now` was read before the lock: another thread's later reading may have filled the
    // bucket to a later time already. Going back would credit that span twice.
    if (now <= bucket.filled)
        return;
    const std::chrono::duration<double> elapsed = now - bucket.filled;
    bucket.tokens = std::min<double>(rate, bucket.tokens + elapsed.count() * rate);
    bucket.filled = now;
}

CancelGuessLimiter::Verdict CancelGuessLimiter::admit(const std::string& peer,
                                                      clock::time_point now) {
    const std::lock_guard lock(mutex_);
    fill(total_, total_rate_, now);
    if (const auto it = peers_.find(peer); it != peers_.end()) {
        fill(it->second, peer_rate_, now);
        if (it->second.tokens < 1)
            return Verdict::OverPeerCap;
    }  // else full
    if (total_.tokens < 1)
        return Verdict::OverTotalCap;
    return Verdict::LookUp;
}

// Admitted lookups of several workers may all turn out wrong: a bucket then goes below
// zero, by as many as there were at once, and refills from there.
void CancelGuessLimiter::charge(const std::string& peer, clock::time_point now) {
    const std::lock_guard lock(mutex_);
    total_.tokens -= 1;
    if (peers_.size() >= sweep_at_)
        forget_full_peers(now);
    const auto it = peers_.try_emplace(peer, Bucket{static_cast<double>(peer_rate_), now}).first;
    fill(it->second, peer_rate_, now);
    it->second.tokens -= 1;
}

// A peer whose bucket has filled up again is as if never seen: the map holds only the peers
// that sent wrong keys within the last second or so, however many addresses come and go.
void CancelGuessLimiter::forget_full_peers(clock::time_point now) {
    for (auto it = peers_.begin(); it != peers_.end();) {
        fill(it->second, peer_rate_, now);
        it = it->second.tokens >= peer_rate_ ? peers_.erase(it) : std::next(it);
    }
    sweep_at_ = std::max(kFirstSweep, 2 * peers_.size());
}

void CancelGuessLimiter::set_rates(unsigned total_per_second, unsigned per_peer_per_second) {
    const std::lock_guard lock(mutex_);
    total_rate_ = total_per_second;
    peer_rate_ = per_peer_per_second;
    total_.tokens = std::min<double>(total_rate_, total_.tokens);
    for (auto& [peer, bucket] : peers_)
        bucket.tokens = std::min<double>(peer_rate_, bucket.tokens);
}

unsigned CancelGuessLimiter::total_rate() const {
    const std::lock_guard lock(mutex_);
    return total_rate_;
}

unsigned CancelGuessLimiter::per_peer_rate() const {
    const std::lock_guard lock(mutex_);
    return peer_rate_;
}

size_t CancelGuessLimiter::peers_held() const {
    const std::lock_guard lock(mutex_);
    return peers_.size();
}

}  // namespace l5pg::daemon
