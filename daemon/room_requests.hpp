// Kept backends the workers are asked to end for a login Postgres refused with SQLSTATE 53300
// (too many connections) on a worker that keeps none it could end itself
// (Session::make_room_for_login()). An ask wakes every worker; the first that keeps a backend
// the ask may end (UpstreamPool::take_for_room()) ends it, and the others leave the ask alone,
// as all do once the login is tried again.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "daemon/pool_directory.hpp"
#include "daemon/upstream_pool.hpp"
#include "daemon/worker_bulletin.hpp"

namespace l5pg::daemon {

class RoomRequests {
  public:
    explicit RoomRequests(const WorkerWakers& wakers) : asks_(wakers) {}

    // From any worker thread: asks for room for a login of `owner` (database, role), which
    // is tried again at `until`: a worker that comes to the ask later leaves it alone.
    void ask(PoolDirectory::Key owner, RoomMatch match,
             std::chrono::steady_clock::time_point until) {
        asks_.post({std::move(owner), match, until, false});
    }

    // A worker's turn: `take(owner, match)` (its own pool's take_for_room()) for each ask after
    // `seen` that no worker has answered yet; an ask it took a connection for is answered.
    // `take` runs under the bulletin's lock and must be quick: the caller ends what it took
    // afterwards.
    template <class Take>
    [[nodiscard]] std::vector<UpstreamPool::Idle> answer(uint64_t& seen, Take&& take) {
        std::vector<UpstreamPool::Idle> taken;
        const auto now = std::chrono::steady_clock::now();
        asks_.read_since(seen, [&](Ask& ask) {
            if (ask.answered || ask.until <= now)
                return;
            if (std::optional<UpstreamPool::Idle> idle = take(ask.owner, ask.match)) {
                taken.push_back(std::move(*idle));
                ask.answered = true;
            }
        });
        return taken;
    }

  private:
    struct Ask {
        PoolDirectory::Key owner;
        RoomMatch match = RoomMatch::Owner;
        std::chrono::steady_clock::time_point until;
        bool answered = false;
    };
    WorkerBulletin<Ask> asks_;
};

}  // namespace l5pg::daemon
