// Who is connected, for the admin console's SHOW SESSIONS (admin_console.hpp): one record
// per session that passed l5pgd's client check, readable from any worker thread.
//
// A record's identity (transport, peer, database, role, start time) is written once before
// it is published; what changes (bytes, activity) is atomic, written by the session's
// worker only with relaxed stores: readers want a recent value, not a consistent cut.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/metrics.hpp"

namespace l5pg::daemon {

struct SessionRecord {
    using clock = std::chrono::steady_clock;

    uint64_t id = 0;
    Transport transport = Transport::Unix;
    std::string client;  // "uid 1000 pid 4242" or "127.0.0.1:51234"
    std::string database;
    std::string role;
    std::chrono::system_clock::time_point connected_at;
    clock::time_point connected;

    std::atomic<uint64_t> bytes_from_client{0};
    std::atomic<uint64_t> bytes_to_client{0};
    std::atomic<bool> active{false};           // Postgres owes an answer (a query runs)
    std::atomic<int64_t> last_activity_ns{0};  // steady clock: last request or answer began
    // Postgres's process serving it (pg_stat_activity.pid), once its key is known: 0 before,
    // for the admin console, or if Postgres sent none.
    std::atomic<uint32_t> backend_pid{0};

    void note_activity(clock::time_point now) noexcept {
        last_activity_ns.store(now.time_since_epoch().count(), std::memory_order_relaxed);
    }
};

class SessionDirectory {
  public:
    // Publishes `record` (complete but for its atomics) until remove(record->id).
    void add(std::shared_ptr<SessionRecord> record);
    void remove(uint64_t id);
    // The records now, ordered by session id.
    [[nodiscard]] std::vector<std::shared_ptr<const SessionRecord>> snapshot() const;

  private:
    mutable std::mutex mutex_;
    std::map<uint64_t, std::shared_ptr<SessionRecord>> records_;
};

}  // namespace l5pg::daemon
