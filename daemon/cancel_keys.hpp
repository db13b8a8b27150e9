// The cancel keys of the sessions l5pgd serves, and the backend each stands for: l5pgd
// forwards a CancelRequest only with one of them (as PgBouncer does), so nobody can try keys
// against backends through it. A session that is not pooled hands its client the backend's
// own key (serve()). Clients of pooled server connections (upstream_pool.hpp) get keys of
// l5pgd's own instead (issue()): a backend outlives its clients there, so its own key must
// never reach one, or a client that kept it could cancel the queries of every later client
// of the same backend, through l5pgd or directly. A key stands for its backend only while
// the client's session lasts. A cancel goes to the server its backend runs on, wherever
// upstream.* points now: a reload, or upstream.host's name answering with another address
// (a failover, DNS round robin), must not send it to another server, whose backend with
// that process id is someone else's or none.
//
// One per l5pgd, shared by the workers: a CancelRequest comes on a connection of its own,
// to any worker.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "daemon/upstream_address.hpp"
#include "protocol/startup.hpp"

namespace l5pg::daemon {

class CancelKeys {
  public:
    using clock = std::chrono::steady_clock;

    // Something held in CancelKeys until the handle ends (moved, not copied).
    class Handle {
      public:
        Handle() = default;
        Handle(Handle&& other) noexcept;
        Handle& operator=(Handle&& other) noexcept;
        Handle(const Handle&) = delete;
        Handle& operator=(const Handle&) = delete;
        ~Handle();

      protected:
        using Release = void (CancelKeys::*)(uint64_t) noexcept;
        Handle(CancelKeys* keys, Release release, uint64_t id) noexcept
            : keys_(keys), release_(release), id_(id) {}
        [[nodiscard]] uint64_t id() const noexcept { return id_; }
        void release_with(Release release) noexcept { release_ = release; }

      private:
        void release() noexcept;
        CancelKeys* keys_ = nullptr;
        Release release_ = nullptr;
        uint64_t id_ = 0;
    };

    // A client's key; withdrawn when the lease ends.
    class Lease : public Handle {
      public:
        Lease() = default;
        [[nodiscard]] protocol::CancelKey key() const noexcept { return unpack(id()); }

      private:
        friend class CancelKeys;
        Lease(CancelKeys* keys, protocol::CancelKey key) noexcept
            : Handle(keys, &CancelKeys::withdraw, pack(key)) {}
    };

    // A cancel for a backend on its way: from the lookup of the client's key until the
    // session carrying the CancelRequest ends (it may wait to connect to Postgres). Unless
    // confirm()ed, its end is not known to be its outcome (its session gave up waiting for
    // Postgres to close the connection: the postmaster may still take the request from its
    // accept queue, much later), and its backend counts as cancelled for an hour more.
    class InFlight : public Handle {
      public:
        InFlight() = default;
        // Postgres closed the cancel connection (it signalled the backend, or found the key
        // wrong), or the request never reached Postgres (no connection).
        void confirm() noexcept { release_with(&CancelKeys::settle); }

      private:
        friend class CancelKeys;
        InFlight(CancelKeys* keys, protocol::CancelKey backend) noexcept
            : Handle(keys, &CancelKeys::settle_in_doubt, pack(backend)) {}
    };

    // A backend: its own key, and the address l5pgd reached its server at.
    struct Backend {
        protocol::CancelKey key;
        UpstreamAddress address;
    };

    struct Translation {
        Backend backend;
        InFlight in_flight;
    };

    // A fresh key (its pid positive as an int32, both parts random, unique among the keys
    // out now) standing for `backend` until the lease ends.
    [[nodiscard]] Lease issue(const Backend& backend);
    // The backend's own key, standing for itself until the lease ends (an empty lease in the
    // unlikely case that one of issue()'s keys is the same).
    [[nodiscard]] Lease serve(const Backend& backend);
    // The backend `client_key` stands for, if it is a key l5pgd gave out and still holds,
    // with the cancel counted as on its way to that backend while `in_flight` lasts.
    [[nodiscard]] std::optional<Translation> backend_for(protocol::CancelKey client_key);
    // Whether a cancel for `backend` is on its way, or its session ended within `window` (or
    // within the hour without confirm()).
    // Postgres delivers a cancel asynchronously (a process of its own signals the backend),
    // so one a client sent just before it left may land after the backend was reset: such
    // a backend is not kept, or the cancel could hit the next client's query.
    [[nodiscard]] bool cancelled_within(protocol::CancelKey backend, clock::duration window) const;
    [[nodiscard]] size_t size() const;

  private:
    static uint64_t pack(protocol::CancelKey key) noexcept {
        return (uint64_t{key.backend_pid} << 32) | key.secret;
    }
    static protocol::CancelKey unpack(uint64_t packed) noexcept {
        return {static_cast<uint32_t>(packed >> 32), static_cast<uint32_t>(packed)};
    }
    void withdraw(uint64_t client_key) noexcept;
    void settle(uint64_t backend) noexcept;
    void settle_in_doubt(uint64_t backend) noexcept;
    void settle_as(uint64_t backend, bool in_doubt) noexcept;

    struct Cancels {
        uint32_t in_flight = 0;
        clock::time_point settled;   // when the last one's session ended
        clock::time_point doubtful;  // until then one not confirmed may still land
    };

    mutable std::mutex mutex_;
    std::unordered_map<uint64_t, Backend> backends_;  // by client key
    // Backend key -> its cancels (on whichever server: the same key on two is conservative);
    // settled entries older than a minute (an hour, in doubt) are dropped as new cancels come.
    std::unordered_map<uint64_t, Cancels> cancelled_;
};

}  // namespace l5pg::daemon
