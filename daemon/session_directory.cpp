#include "daemon/session_directory.hpp"

namespace l5pg::daemon {

void SessionDirectory::add(std::shared_ptr<SessionRecord> record) {
    std::lock_guard lock(mutex_);
    const uint64_t id = record->id;
    records_[id] = std::move(record);
}

void SessionDirectory::remove(uint64_t id) {
    std::lock_guard lock(mutex_);
    records_.erase(id);
}

std::vector<std::shared_ptr<const SessionRecord>> SessionDirectory::snapshot() const {
    std::lock_guard lock(mutex_);
    std::vector<std::shared_ptr<const SessionRecord>> out;
    out.reserve(records_.size());
    for (const auto& [id, record] : records_)
        out.push_back(record);
    return out;
}

}  // namespace l5pg::daemon
