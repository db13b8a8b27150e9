// Caps on connections still in startup (limits.max_startup_sessions, in all, and
// limits.max_startup_per_peer, per client uid or TCP address), so that sockets which
// connect and send nothing cannot keep other clients out until they time out.
// Thread-safe: the acceptor takes slots, workers release them.
#pragma once

#include <mutex>
#include <string>
#include <unordered_map>

namespace l5pg::daemon {

class StartupLimiter {
  public:
    StartupLimiter(unsigned max_total, unsigned max_per_peer)
        : max_total_(max_total), max_per_peer_(max_per_peer) {}
    StartupLimiter(const StartupLimiter&) = delete;
    StartupLimiter& operator=(const StartupLimiter&) = delete;

    // Held by a session until its StartupMessage is complete (or it closes).
    class Slot {
      public:
        Slot() = default;
        Slot(Slot&& other) noexcept;
        Slot& operator=(Slot&& other) noexcept;
        ~Slot() { release(); }
        void release() noexcept;
        [[nodiscard]] bool held() const noexcept { return owner_ != nullptr; }

      private:
        friend class StartupLimiter;
        Slot(StartupLimiter* owner, std::string key) : owner_(owner), key_(std::move(key)) {}
        StartupLimiter* owner_ = nullptr;
        std::string key_;
    };

    enum class Refusal { None, Total, PerPeer };
    // An empty (not held) slot and the reason when a cap is reached.
    [[nodiscard]] Slot try_acquire(const std::string& peer_key, Refusal& refusal);

    [[nodiscard]] unsigned in_startup() const;

    // New caps (a reload): slots already held stay; new ones are checked against these.
    void set_caps(unsigned max_total, unsigned max_per_peer);

  private:
    void give_back(const std::string& peer_key) noexcept;

    mutable std::mutex mutex_;
    unsigned max_total_;                                  // guarded by mutex_
    unsigned max_per_peer_;                               // guarded by mutex_
    unsigned total_ = 0;                                  // guarded by mutex_
    std::unordered_map<std::string, unsigned> per_peer_;  // guarded by mutex_
};

}  // namespace l5pg::daemon
