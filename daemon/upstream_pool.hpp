// Server connections kept for the next client (pool.mode: session), like PgBouncer's
// session pooling. When a client leaves cleanly -- it sent Terminate, Postgres answered
// everything it asked and is idle outside a transaction -- its session resets the server
// connection (protocol/pool_reset.hpp) and parks it here with the greeting Postgres gave it
// (protocol/server_greeting.hpp). A later client of the same identity (the same OS user over
// a Unix socket, the same address over TCP) whose StartupMessage is byte for byte the
// same, and who passed l5pgd's own client check, takes it: the backend's start-up, its
// catalog caches and its first touches of shared buffers are paid once, not per client.
//
// One pool per worker: a connection's events belong to that worker's event base. An idle
// connection is closed (after a Terminate) when it has been idle for pool.idle_timeout_ms,
// when its backend has lived pool.server_lifetime_ms (so that what Postgres checks only at
// connection time and a role cannot ask -- pg_hba.conf -- applies
// again; the rest is asked before each reuse, protocol/pool_login_check.hpp), when pool.max_idle
// would be exceeded (the oldest goes; also when a reload lowers it, and a reload's timeouts apply
// to what is kept already), when Postgres sends anything or closes it (a backend terminated by an
// administrator, an idle_session_timeout), at shutdown, and when a reload sets pool.mode to none or
// points upstream.* elsewhere.
#pragma once

#include <chrono>
#include <list>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "daemon/event_ptr.hpp"
#include "daemon/metrics.hpp"
#include "daemon/pool_directory.hpp"
#include "daemon/unique_fd.hpp"
#include "daemon/upstream_address.hpp"
#include "protocol/server_greeting.hpp"

namespace l5pg::daemon {

// Which kept connection may end for a login Postgres refused with SQLSTATE 53300: one of the
// login's role and database (that helps under any limit), one of its role or of its database
// (a role's or a database's CONNECTION LIMIT), or any (max_connections).
enum class RoomMatch : uint8_t { Owner, RoleOrDatabase, Any };

// Terminate: the backend ends without logging an unexpected EOF. (A send that does not fit at
// once is not retried: closing the socket ends the backend as well.)
void send_terminate(int fd);

class UpstreamPool {
  public:
    using clock = std::chrono::steady_clock;
    struct Idle {
        UniqueFd fd;
        protocol::ServerGreeting greeting;
        clock::time_point born;     // when the backend was started (pool.server_lifetime_ms)
        std::string role_settings;  // PoolLoginCheck::settings() at its start
        UpstreamAddress address;    // where its server was reached (its cancels go there)
    };
    struct Limits {
        size_t max_idle = 0;  // this pool's share of pool.max_idle; 0 keeps none
        std::chrono::milliseconds idle_timeout{};
        std::chrono::milliseconds server_lifetime{};
    };

    // `directory` (shared by the workers) learns what this pool keeps, for SHOW POOLS.
    UpstreamPool(event_base* base, Metrics& metrics, PoolDirectory& directory);
    ~UpstreamPool();
    UpstreamPool(const UpstreamPool&) = delete;
    UpstreamPool& operator=(const UpstreamPool&) = delete;

    // The most recently parked connection for `startup` (the client's identity and its
    // StartupMessage's bytes: Session::pool_slot()) whose backend is still there.
    [[nodiscard]] std::optional<Idle> take(std::string_view startup);
    // For a new backend Postgres refused with SQLSTATE 53300 (too many connections): the
    // kept connection whose end most likely makes room, for the caller to end
    // (send_terminate()). Of those idle longest: one of `owner` (database, role), else as far
    // as `match` allows, of its role, else of its database, else any. Nothing when none
    // matches. One that Postgres ended meanwhile is dropped, not taken. Counted in
    // l5pg_pool_ended_for_room_total.
    [[nodiscard]] std::optional<Idle> take_for_room(const PoolDirectory::Key& owner,
                                                    RoomMatch match);
    // Keeps `idle`, a connection of `owner` (database, role), for clients with `startup`,
    // until it has been idle for `limits.idle_timeout` or its backend has lived for
    // `limits.server_lifetime`; the oldest go beyond `limits.max_idle`. False if it was
    // closed instead (no room, or its lifetime is over).
    [[nodiscard]] bool park(std::string startup, PoolDirectory::Key owner, Idle idle,
                            const Limits& limits);
    // A reload's limits for what is kept already: the oldest go beyond `limits.max_idle`,
    // and the deadlines follow the new timeouts.
    void apply(const Limits& limits);
    // Closes every idle connection.
    void clear();
    // Closes those whose server was reached at one of `addresses` (UpstreamAddress::bytes());
    // how many.
    size_t drop_reached_at(const std::set<std::string>& addresses);
    [[nodiscard]] size_t size() const noexcept { return entries_.size(); }

  private:
    struct Entry {
        std::string startup;
        PoolDirectory::Key owner;
        Idle idle;
        clock::time_point parked;
        clock::time_point deadline;
        EventPtr watch;  // readable: Postgres spoke or left
    };
    using Entries = std::list<Entry>;  // newest first

    static void readable_cb(int fd, short what, void* arg);
    static void expiry_cb(int fd, short what, void* arg);
    Entries::iterator drop(Entries::iterator at);
    Idle remove(Entries::iterator at);
    Entries::iterator choose_for_room(const PoolDirectory::Key& owner, RoomMatch match);
    void trim(size_t max_idle);
    void count(const Entry& entry, int64_t delta);
    void expire();
    void arm_expiry();

    event_base* base_;
    Metrics& metrics_;
    PoolDirectory& directory_;
    Entries entries_;
    EventPtr expiry_timer_;
};

}  // namespace l5pg::daemon
