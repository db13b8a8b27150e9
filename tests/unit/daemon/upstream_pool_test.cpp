// UpstreamPool without a Postgres: socket pairs stand for kept server connections.
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "daemon/event_ptr.hpp"
#include "daemon/metrics.hpp"
#include "daemon/pool_directory.hpp"
#include "daemon/room_requests.hpp"
#include "daemon/upstream_pool.hpp"
#include "daemon/worker_bulletin.hpp"

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

// A pool on an event base whose loop never runs (no timer fires).
struct Pool {
    l5pg::daemon::EventBasePtr base{event_base_new()};
    l5pg::daemon::Metrics metrics;
    l5pg::daemon::PoolDirectory directory;
    UpstreamPool pool{base.get(), metrics, directory};
};

}  // namespace

// The expiry timer runs in the worker's loop, after whatever else is ready in that round: a
// client's StartupMessage read in the same round took a connection whose idle timeout or
// lifetime had passed a moment before.
TEST_CASE("UpstreamPool: a connection past its deadline is not handed out, timer or not") {
    Pool p;
    UpstreamPool& pool = p.pool;
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

// For a login Postgres refused with 53300: of those idle longest, the owner's, else its role's,
// else its database's, else (max_connections) any; what is taken leaves the pool and the
// directory.
TEST_CASE("UpstreamPool: the connection taken for room is the nearest kin idle longest") {
    using l5pg::daemon::RoomMatch;
    Pool p;
    UpstreamPool& pool = p.pool;
    const UpstreamPool::Limits lasting{8, 1h, 1h};
    std::vector<Pair> pairs;
    std::vector<int> kept_fds;
    const auto park = [&](std::string db, std::string role) {
        pairs.push_back(socket_pair());
        kept_fds.push_back(pairs.back().kept.get());
        REQUIRE(pool.park(db + role, {std::move(db), std::move(role)},
                          UpstreamPool::Idle{
                              std::move(pairs.back().kept), {}, UpstreamPool::clock::now(), "", {}},
                          lasting));
    };
    park("other", "other");  // 0: idle longest
    park("db", "carol");     // 1: bob's database
    park("app", "bob");      // 2: bob's role
    park("db", "bob");       // 3: bob's own, idle longest of his
    park("db", "bob");       // 4
    const auto taken_fd = [&](std::string db, std::string role, RoomMatch match) {
        const auto taken = pool.take_for_room({std::move(db), std::move(role)}, match);
        return taken ? taken->fd.get() : -1;
    };
    CHECK(taken_fd("db", "bob", RoomMatch::Owner) == kept_fds[3]);
    CHECK(taken_fd("db", "bob", RoomMatch::Owner) == kept_fds[4]);
    CHECK(taken_fd("db", "bob", RoomMatch::Owner) == -1);  // his own only
    CHECK(taken_fd("db", "bob", RoomMatch::RoleOrDatabase) == kept_fds[2]);
    CHECK(taken_fd("db", "bob", RoomMatch::RoleOrDatabase) == kept_fds[1]);
    CHECK(taken_fd("db", "bob", RoomMatch::RoleOrDatabase) == -1);  // no kin left
    CHECK(p.directory.holds_role_or_database({"other", "dave"}));
    CHECK_FALSE(p.directory.holds_role_or_database({"db", "bob"}));
    CHECK(taken_fd("db", "bob", RoomMatch::Any) == kept_fds[0]);
    CHECK(pool.size() == 0);
    CHECK(p.directory.empty());
    CHECK(taken_fd("db", "bob", RoomMatch::Any) == -1);
}

TEST_CASE("UpstreamPool: a connection Postgres ended is not taken for room") {
    Pool p;
    UpstreamPool& pool = p.pool;
    const UpstreamPool::Limits lasting{4, 1h, 1h};
    Pair live = socket_pair();
    Pair ended = socket_pair();
    const int live_fd = live.kept.get();
    const auto park = [&](Pair& pair, std::string startup) {
        REQUIRE(pool.park(
            std::move(startup), {"db", "bob"},
            UpstreamPool::Idle{std::move(pair.kept), {}, UpstreamPool::clock::now(), "", {}},
            lasting));
    };
    park(ended, "a");  // idle longest: chosen first
    park(live, "b");
    ended.peer.reset();  // its backend's EOF, not yet seen by the loop
    const auto taken = pool.take_for_room({"db", "bob"}, l5pg::daemon::RoomMatch::Owner);
    REQUIRE(taken);
    CHECK(taken->fd.get() == live_fd);
    CHECK(pool.size() == 0);
}

TEST_CASE("RoomRequests: each ask is answered once, by the first worker that can") {
    using l5pg::daemon::PoolDirectory;
    using l5pg::daemon::RoomMatch;
    l5pg::daemon::WorkerWakers wakers;
    int wakes = 0;
    wakers.add([&wakes] { ++wakes; });
    wakers.add([&wakes] { ++wakes; });
    l5pg::daemon::RoomRequests room(wakers);
    std::vector<PoolDirectory::Key> asked;
    const auto nothing_kept = [&asked](const PoolDirectory::Key& owner, RoomMatch) {
        asked.push_back(owner);
        return std::optional<UpstreamPool::Idle>();
    };
    const auto kept = [&asked](const PoolDirectory::Key& owner, RoomMatch) {
        asked.push_back(owner);
        return std::optional<UpstreamPool::Idle>(UpstreamPool::Idle{});
    };
    const auto later = std::chrono::steady_clock::now() + 1h;
    uint64_t first = 0;
    uint64_t second = 0;
    CHECK(room.answer(first, kept).empty());  // nothing asked
    room.ask({"db", "alice"}, RoomMatch::RoleOrDatabase, later);
    room.ask({"db", "bob"}, RoomMatch::Any, later);
    CHECK(wakes == 4);
    CHECK(room.answer(first, nothing_kept).empty());  // the first worker keeps nothing
    CHECK(asked == std::vector<PoolDirectory::Key>{{"db", "alice"}, {"db", "bob"}});
    CHECK(room.answer(first, kept).empty());  // seen already
    CHECK(room.answer(second, kept).size() == 2);
    asked.clear();
    CHECK(room.answer(second, kept).empty());
    uint64_t third = 0;
    CHECK(room.answer(third, kept).empty());  // answered: not asked of a third worker
    CHECK(asked.empty());
    for (int i = 0; i < 100; ++i)
        room.ask({"db", "many"}, RoomMatch::Any, later);
    CHECK(room.answer(third, kept).size() == 64);  // the last 64 only
    room.ask({"db", "late"}, RoomMatch::Any, std::chrono::steady_clock::now());
    CHECK(room.answer(third, kept).empty());  // the login was tried again already
}

TEST_CASE("WorkerBulletin: each worker reads each note once, the last 64 at most") {
    l5pg::daemon::WorkerWakers wakers;
    int wakes = 0;
    wakers.add([&wakes] { ++wakes; });
    l5pg::daemon::WorkerBulletin<std::string> bulletin(wakers);
    const auto read = [&bulletin](uint64_t& seen) {
        std::vector<std::string> notes;
        bulletin.read_since(seen, [&notes](const std::string& note) { notes.push_back(note); });
        return notes;
    };
    uint64_t first = 0;
    uint64_t second = 0;
    CHECK(read(first).empty());
    bulletin.post("a");
    bulletin.post("b");
    CHECK(wakes == 2);
    CHECK(read(first) == std::vector<std::string>{"a", "b"});
    CHECK(read(first).empty());
    bulletin.post("c");
    CHECK(read(first) == std::vector<std::string>{"c"});
    CHECK(read(second) == std::vector<std::string>{"a", "b", "c"});
    for (int i = 0; i < 100; ++i)
        bulletin.post("many");
    CHECK(read(second).size() == 64);
}
