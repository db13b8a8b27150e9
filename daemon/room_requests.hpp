// Kept backends the workers are asked to end for a login Postgres refused with SQLSTATE 53300
// (too many connections) on a worker that kept none it could end itself
// (Session::make_room_for_login()). An ask wakes every worker; each one that keeps a backend
// ends the one UpstreamPool::take_for_room() names for the ask's database and role, once per
// ask it has not seen. So an ask may end a kept backend in each worker: they are a cache,
// and the login it was for would have found none of them connecting directly.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "daemon/pool_directory.hpp"

namespace l5pg::daemon {

class RoomRequests {
  public:
    // Before the workers run: how to wake each one (Worker::wake(), thread-safe).
    void add_waker(std::function<void()> wake) { wakers_.push_back(std::move(wake)); }

    // From any worker thread: asks for room for a login of `owner` (database, role).
    void ask(PoolDirectory::Key owner) {
        {
            const std::lock_guard lock(mutex_);
            asks_.emplace_back(last_.load(std::memory_order_relaxed) + 1, std::move(owner));
            if (asks_.size() > kRemembered)
                asks_.pop_front();
            last_.store(asks_.back().first, std::memory_order_relaxed);
        }
        for (const auto& wake : wakers_)
            wake();
    }

    // The asks after `seen` (a worker's own count, moved past them). Asks beyond the last
    // kRemembered are forgotten: a worker that was that far behind ends no more for them.
    [[nodiscard]] std::vector<PoolDirectory::Key> since(uint64_t& seen) const {
        std::vector<PoolDirectory::Key> owners;
        if (last_.load(std::memory_order_relaxed) == seen)
            return owners;  // every wake asks: no lock while nothing was asked
        const std::lock_guard lock(mutex_);
        for (const auto& [number, owner] : asks_)
            if (number > seen)
                owners.push_back(owner);
        seen = last_.load(std::memory_order_relaxed);
        return owners;
    }

  private:
    static constexpr size_t kRemembered = 64;

    std::vector<std::function<void()>> wakers_;  // set before the workers start, then read only
    mutable std::mutex mutex_;
    // The number of the last ask: written under the mutex, read without it to skip the lock
    // (a wake that follows an ask sees it: the eventfd's write and read order them).
    std::atomic<uint64_t> last_{0};
    std::deque<std::pair<uint64_t, PoolDirectory::Key>> asks_;  // guarded by the mutex
};

}  // namespace l5pg::daemon
