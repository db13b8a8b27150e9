// How many server connections each worker's pool keeps idle, per database and role, for the
// admin console's SHOW POOLS: written by the workers' pools (upstream_pool.hpp) as they
// keep, hand out and close connections, read from any worker thread.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace l5pg::daemon {

class PoolDirectory {
  public:
    using Key = std::pair<std::string, std::string>;  // database, role

    void change(const Key& key, int64_t delta);
    // Idle connections now, by database and role (none listed with 0).
    [[nodiscard]] std::map<Key, uint64_t> snapshot() const;
    [[nodiscard]] bool empty() const;
    // Whether some connection of `owner` is kept; of its role or of its database.
    [[nodiscard]] bool holds(const Key& owner) const;
    [[nodiscard]] bool holds_role_or_database(const Key& owner) const;

  private:
    mutable std::mutex mutex_;
    std::map<Key, uint64_t> idle_;
};

}  // namespace l5pg::daemon
