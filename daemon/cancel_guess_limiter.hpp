// A cap on the CancelRequests l5pgd looks up with a key it does not know
// (limits.wrong_cancel_keys_per_second, in all and per peer: a client uid on the Unix
// socket, an address on TCP). A cancel key is a backend's process id, which every role can
// read in pg_stat_activity, and a 32-bit secret. Postgres forks a process for every
// CancelRequest, which holds a guesser to some thousands of keys a second; l5pgd drops a
// wrong key without reaching Postgres, in microseconds, and guessing through it would take
// hours rather than weeks. Over a cap, every CancelRequest of that peer (of everyone, over
// the total one) is dropped without being looked up, a right key too: a guess must not be
// tried, and a guess cannot be told from a cancel. Only a wrong key costs (charge()), so
// the caps only ever hold back a peer while it, or everyone together, sends wrong keys
// faster than they allow. Each cap is a token bucket holding one second's worth: the rate
// on average, after a first burst of as many.
// Thread-safe: one per l5pgd, shared by the workers.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <unordered_map>

namespace l5pg::daemon {

class CancelGuessLimiter {
  public:
    using clock = std::chrono::steady_clock;

    CancelGuessLimiter(unsigned total_per_second, unsigned per_peer_per_second);
    CancelGuessLimiter(const CancelGuessLimiter&) = delete;
    CancelGuessLimiter& operator=(const CancelGuessLimiter&) = delete;

    enum class Verdict { LookUp, OverPeerCap, OverTotalCap };
    // Whether a CancelRequest from `peer` may be looked up now.
    [[nodiscard]] Verdict admit(const std::string& peer, clock::time_point now);
    // The key of an admitted CancelRequest was wrong.
    void charge(const std::string& peer, clock::time_point now);

    // New rates (a reload): what is in the buckets stays, up to the new sizes.
    void set_rates(unsigned total_per_second, unsigned per_peer_per_second);
    [[nodiscard]] unsigned total_rate() const;
    [[nodiscard]] unsigned per_peer_rate() const;
    // Peers held in memory: those that sent a wrong key and were not full at the last sweep.
    [[nodiscard]] size_t peers_held() const;

  private:
    struct Bucket {
        double tokens = 0;
        clock::time_point filled;
    };
    static void fill(Bucket& bucket, unsigned rate, clock::time_point now) noexcept;
    void forget_full_peers(clock::time_point now);

    mutable std::mutex mutex_;
    unsigned total_rate_;  // guarded by mutex_
    unsigned peer_rate_;   // guarded by mutex_
    Bucket total_;         // guarded by mutex_
    // Guarded by mutex_: the peers that sent a wrong key; one whose bucket filled up again
    // goes at the next sweep (a peer not there has a full bucket).
    std::unordered_map<std::string, Bucket> peers_;
    size_t sweep_at_ = kFirstSweep;  // guarded by mutex_
    static constexpr size_t kFirstSweep = 1024;
};

}  // namespace l5pg::daemon
