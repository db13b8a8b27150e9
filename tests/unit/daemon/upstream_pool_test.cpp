// UpstreamPool without a Postgres: socket pairs stand for kept server connections.
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "daemon/event_ptr.hpp"
#include "daemon/metrics.hpp"
#include "daemon/pool_directory.hpp"
#include "daemon/room_requests.hpp"
#include "daemon/upstream_pool.hpp"

using namespace std::chrono_literals;
using l5pg::daemon::UniqueFd;
using l5pg::daemon::UpstreamPool;

namespace {

struct Pair {
    UniqueFd kept;  // l5pgd's end
    UniqueFd peer;  // Postgres's
};

Pair socket_pair() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) == 0);
    return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

}  // namespace

// The expiry timer runs in the worker's loop, after whatever else is ready in that round: a
// client's StartupMessage read in the same round took a connection whose idle timeout or
// lifetime had passed a moment before.
TEST_CASE("UpstreamPool: a connection past its deadline is not handed out, timer or not") {
    l5pg::daemon::EventBasePtr base(event_base_new());
    l5pg::daemon::Metrics metrics;
    l5pg::daemon::PoolDirectory directory;
    UpstreamPool pool(base.get(), metrics, directory);
    const UpstreamPool::Limits limits{2, 30ms, 1h};
    const UpstreamPool::Limits lasting{2, 1h, 1h};
    Pair stale = socket_pair();
    Pair fresh = socket_pair();
    REQUIRE(pool.park(
        "a", {"db", "alice"},
        UpstreamPool::Idle{std::move(stale.kept), {}, UpstreamPool::clock::now(), "", {}}, limits));
    std::this_thread::sleep_for(60ms);  // the loop does not run: no timer fires
    REQUIRE(
        pool.park("b", {"db", "bob"},
                  UpstreamPool::Idle{std::move(fresh.kept), {}, UpstreamPool::clock::now(), "", {}},
                  lasting));
    CHECK_FALSE(pool.take("a").has_value());
    CHECK(pool.size() == 1);
    CHECK(pool.take("b").has_value());
    CHECK(pool.size() == 0);
}

// For a login Postgres refused with 53300: the owner's oldest, else the oldest of all; what is
// taken leaves the pool and the directory.
TEST_CASE("UpstreamPool: the connection taken for room is the owner's oldest, else the oldest") {
    l5pg::daemon::EventBasePtr base(event_base_new());
    l5pg::daemon::Metrics metrics;
    l5pg::daemon::PoolDirectory directory;
    UpstreamPool pool(base.get(), metrics, directory);
    const UpstreamPool::Limits lasting{4, 1h, 1h};
    std::vector<Pair> pairs;
    std::vector<int> kept_fds;
    const auto park = [&](std::string startup, std::string role) {
        pairs.push_back(socket_pair());
        kept_fds.push_back(pairs.back().kept.get());
        REQUIRE(pool.park(std::move(startup), {"db", std::move(role)},
                          UpstreamPool::Idle{
                              std::move(pairs.back().kept), {}, UpstreamPool::clock::now(), "", {}},
                          lasting));
    };
    park("a1", "alice");  // the oldest of all
    park("b1", "bob");    // bob's oldest
    park("b2", "bob");
    auto taken = pool.take_for_room({"db", "bob"});
    REQUIRE(taken);
    CHECK(taken->fd.get() == kept_fds[1]);
    taken = pool.take_for_room({"db", "carol"});  // none of carol's: the oldest of all
    REQUIRE(taken);
    CHECK(taken->fd.get() == kept_fds[0]);
    CHECK(pool.size() == 1);
    CHECK(directory.snapshot() ==
          std::map<l5pg::daemon::PoolDirectory::Key, uint64_t>{{{"db", "bob"}, 1}});
    CHECK(pool.take_for_room({"db", "carol"}));
    CHECK_FALSE(pool.take_for_room({"db", "carol"}));
    CHECK(directory.empty());
}

TEST_CASE("RoomRequests: each worker sees each ask once, the last 64 at most") {
    l5pg::daemon::RoomRequests room;
    int wakes = 0;
    room.add_waker([&wakes] { ++wakes; });
    room.add_waker([&wakes] { ++wakes; });
    uint64_t first = 0;
    uint64_t second = 0;
    CHECK(room.since(first).empty());
    room.ask({"db", "alice"});
    room.ask({"db", "bob"});
    CHECK(wakes == 4);
    CHECK(room.since(first) ==
          std::vector<l5pg::daemon::PoolDirectory::Key>{{"db", "alice"}, {"db", "bob"}});
    CHECK(room.since(first).empty());
    room.ask({"db", "carol"});
    CHECK(room.since(first) == std::vector<l5pg::daemon::PoolDirectory::Key>{{"db", "carol"}});
    CHECK(room.since(second).size() == 3);
    for (int i = 0; i < 100; ++i)
        room.ask({"db", "many"});
    CHECK(room.since(second).size() == 64);
}
