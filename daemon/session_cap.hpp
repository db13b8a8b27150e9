// limits.max_sessions across the workers. As Postgres takes a max_connections slot only
// once a client's startup packet is in, a session takes a place at its StartupMessage (or at
// an upgrade request before it: the rings or the RDMA channel are what the cap bounds), and
// holds it until it closes or is refused. Connections before that (idle, in their TLS
// handshake, CancelRequests) take none: the startup caps bound them, and they keep no one
// out. A StartupMessage that finds every place taken gets FATAL 53300, after the TLS
// negotiation (refused at accept, libpq 17.1, 16.5, 15.9, 14.14 and later would show only
// "server sent an error response during SSL exchange", and a full l5pgd would forward no
// cancel). Thread-safe: workers take places, sessions give them back.
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
