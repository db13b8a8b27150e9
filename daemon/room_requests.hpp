// Kept backends the workers are asked to end for a login Postgres refused with SQLSTATE 53300
// (too many connections) on a worker that keeps none it could end itself
// (Session::make_room_for_login()). An ask wakes every worker; the first that keeps a backend
// the ask may end (UpstreamPool::take_for_room()) ends it, and the others leave the ask alone,
// as all do once the login is tried again.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include "daemon/pool_directory.hpp"
#include "daemon/upstream_pool.hpp"
#include "daemon/worker_wakers.hpp"

namespace l5pg::daemon {

class RoomRequests {
  public:
    explicit RoomRequests(const WorkerWakers& wakers) : wakers_(wakers) {}

    // From any worker thread: asks for room for a login of `owner` (database, role), which
    // is tried again at `until`: a worker that comes to the ask later leaves it alone.
    void ask(PoolDirectory::Key owner, RoomMatch match,
             std::chrono::steady_clock::time_point until) {
        {
            const std::lock_guard lock(mutex_);
            asks_.push_back(
                {last_.load(std::memory_order_relaxed) + 1, std::move(owner), match, until});
            if (asks_.size() > kRemembered)
                asks_.pop_front();
            last_.store(asks_.back().number, std::memory_order_relaxed);
        }
        wakers_.wake_all();
    }

    // A worker's turn: `take(owner, match)` (its own pool's take_for_room()) for each ask after
    // `seen` (the worker's count, moved past them) that no worker has answered yet; an ask it
    // took a connection for is answered. Under the lock, so that one worker at most answers an
    // ask: `take` must be quick (the caller ends what it took afterwards). Asks beyond the last
    // kRemembered are forgotten.
    template <class Take>
    [[nodiscard]] std::vector<UpstreamPool::Idle> answer(uint64_t& seen, Take&& take) {
        std::vector<UpstreamPool::Idle> taken;
        if (last_.load(std::memory_order_relaxed) == seen)
            return taken;  // every wake asks: no lock while nothing was asked
        const std::lock_guard lock(mutex_);
        const auto now = std::chrono::steady_clock::now();
        for (Ask& ask : asks_) {
            if (ask.number <= seen || ask.answered || ask.until <= now)
                continue;
            if (std::optional<UpstreamPool::Idle> idle = take(ask.owner, ask.match)) {
                taken.push_back(std::move(*idle));
                ask.answered = true;
            }
        }
        seen = last_.load(std::memory_order_relaxed);
        return taken;
    }

  private:
    static constexpr size_t kRemembered = 64;
    struct Ask {
        uint64_t number = 0;
        PoolDirectory::Key owner;
        RoomMatch match = RoomMatch::Owner;
        std::chrono::steady_clock::time_point until;
        bool answered = false;
    };

    const WorkerWakers& wakers_;
    std::mutex mutex_;
    // The number of the last ask: written under the mutex, read without it to skip the lock
    // (a wake that follows an ask sees it: the eventfd's write and read order them).
    std::atomic<uint64_t> last_{0};
    std::deque<Ask> asks_;  // guarded by the mutex
};

}  // namespace l5pg::daemon
