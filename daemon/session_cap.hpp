// limits.max_sessions across the workers: a session the cap admits holds a place until it
// closes. A client that finds every place taken is still heard (AcceptedClient::
// over_max_sessions) and asks again at its StartupMessage, when a place may have come free
// meanwhile (its TLS handshake or an idle connection before it ended). Only places count:
// connections waiting to be refused take none, so they keep no one out once a place is
// free. Thread-safe: the acceptor and the workers take places, sessions give them back.
#pragma once

#include <atomic>
#include <cstddef>
#include <utility>

namespace l5pg::daemon {

class SessionCap {
  public:
    SessionCap() = default;
    SessionCap(const SessionCap&) = delete;
    SessionCap& operator=(const SessionCap&) = delete;

    class Place {
      public:
        Place() = default;
        Place(Place&& other) noexcept : owner_(std::exchange(other.owner_, nullptr)) {}
        Place& operator=(Place&& other) noexcept {
            if (this != &other) {
                release();
                owner_ = std::exchange(other.owner_, nullptr);
            }
            return *this;
        }
        ~Place() { release(); }
        void release() noexcept {
            if (owner_ != nullptr)
                std::exchange(owner_, nullptr)->taken_.fetch_sub(1, std::memory_order_relaxed);
        }
        [[nodiscard]] bool held() const noexcept { return owner_ != nullptr; }

      private:
        friend class SessionCap;
        explicit Place(SessionCap* owner) noexcept : owner_(owner) {}
        SessionCap* owner_ = nullptr;
    };

    // A place if fewer than `max` are taken (max is read per call: reloads change it),
    // else an empty one.
    [[nodiscard]] Place try_take(size_t max) noexcept {
        size_t taken = taken_.load(std::memory_order_relaxed);
        while (taken < max)
            if (taken_.compare_exchange_weak(taken, taken + 1, std::memory_order_relaxed))
                return Place(this);
        return Place();
    }

    [[nodiscard]] size_t taken() const noexcept { return taken_.load(std::memory_order_relaxed); }

  private:
    std::atomic<size_t> taken_{0};
};

}  // namespace l5pg::daemon
