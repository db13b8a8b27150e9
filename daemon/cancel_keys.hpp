// The cancel keys l5pgd gives the clients of pooled server connections (upstream_pool.hpp)
// in place of the backend's own, and the backend each stands for. A backend outlives its
// clients there, so its own key must never reach one: a client that kept it could cancel
// the queries of every later client of the same backend, through l5pgd or directly. A
// client's key stands for its backend only while the client's session lasts.
//
// One per l5pgd, shared by the workers: a CancelRequest comes on a connection of its own,
// to any worker.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "protocol/startup.hpp"

namespace l5pg::daemon {

class CancelKeys {
  public:
    // A client's key; withdrawn when the lease ends.
    class Lease {
      public:
        Lease() = default;
        Lease(Lease&& other) noexcept;
        Lease& operator=(Lease&& other) noexcept;
        Lease(const Lease&) = delete;
        Lease& operator=(const Lease&) = delete;
        ~Lease();

        [[nodiscard]] protocol::CancelKey key() const noexcept { return key_; }

      private:
        friend class CancelKeys;
        Lease(CancelKeys* keys, protocol::CancelKey key) noexcept : keys_(keys), key_(key) {}
        CancelKeys* keys_ = nullptr;
        protocol::CancelKey key_{};
    };

    // A fresh key (its pid positive as an int32, both parts random, unique among the keys
    // out now) standing for `backend` until the lease ends.
    [[nodiscard]] Lease issue(protocol::CancelKey backend);
    // The backend `client_key` stands for, if it is a key l5pgd gave out and still holds.
    // Each answer is remembered as a cancel on its way to that backend (see below).
    [[nodiscard]] std::optional<protocol::CancelKey> backend_for(protocol::CancelKey client_key);
    // Whether a cancel for `backend` was let through within `window`. Postgres delivers a
    // cancel asynchronously (a process of its own signals the backend), so one a client
    // sent just before it left may land after the backend was reset: such a backend is not
    // kept, or the cancel could hit the next client's query.
    [[nodiscard]] bool cancelled_within(protocol::CancelKey backend,
                                        std::chrono::steady_clock::duration window) const;
    [[nodiscard]] size_t size() const;

  private:
    static uint64_t pack(protocol::CancelKey key) noexcept {
        return (uint64_t{key.backend_pid} << 32) | key.secret;
    }
    void withdraw(protocol::CancelKey key) noexcept;

    mutable std::mutex mutex_;
    std::unordered_map<uint64_t, protocol::CancelKey> backends_;  // client key -> backend key
    // Backend key -> when a cancel for it was last let through; entries older than a minute
    // are dropped as new ones come.
    std::unordered_map<uint64_t, std::chrono::steady_clock::time_point> cancelled_;
};

}  // namespace l5pg::daemon
