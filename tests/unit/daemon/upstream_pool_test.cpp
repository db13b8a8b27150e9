// UpstreamPool without a Postgres: socket pairs stand for kept server connections.
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "daemon/event_ptr.hpp"
#include "daemon/metrics.hpp"
#include "daemon/pool_directory.hpp"
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
