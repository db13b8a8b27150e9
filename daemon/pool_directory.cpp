#include "daemon/pool_directory.hpp"

#include <algorithm>

namespace l5pg::daemon {

void PoolDirectory::change(const Key& key, int64_t delta) {
    const std::lock_guard lock(mutex_);
    uint64_t& idle = idle_[key];
    idle = delta < 0 && idle < static_cast<uint64_t>(-delta) ? 0 : idle + delta;
    if (idle == 0)
        idle_.erase(key);
}

std::map<PoolDirectory::Key, uint64_t> PoolDirectory::snapshot() const {
    const std::lock_guard lock(mutex_);
    return idle_;
}

bool PoolDirectory::empty() const {
    const std::lock_guard lock(mutex_);
    return idle_.empty();
}

bool PoolDirectory::holds(const Key& owner) const {
    const std::lock_guard lock(mutex_);
    return idle_.contains(owner);
}

bool PoolDirectory::holds_role_or_database(const Key& owner) const {
    const std::lock_guard lock(mutex_);
    return std::any_of(idle_.begin(), idle_.end(), [&owner](const auto& entry) {
        return entry.first.first == owner.first || entry.first.second == owner.second;
    });
}

}  // namespace l5pg::daemon
