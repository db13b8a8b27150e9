#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <vector>

#include <catch2/catch.hpp>

#include "transport/wait/adaptive_spin.hpp"
#include "transport/wait/doorbell.hpp"
#include "transport/wait/policy.hpp"
#include "transport/wait/spin.hpp"

using namespace l5pg::wait;

namespace {

struct SocketPair {
    int fd[2] = {-1, -1};
    SocketPair() { REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd) == 0); }
    ~SocketPair() {
        close(0);
        close(1);
    }
    void close(int i) {
        if (fd[i] >= 0)
            ::close(fd[i]);
        fd[i] = -1;
    }
};

}  // namespace

TEST_CASE("WaitPolicy: cut to what is left of a caller's timeout", "[wait]") {
    using namespace std::chrono_literals;
    const l5pg::wait::WaitPolicy policy{50us, 200us};
    CHECK(policy.within(1s).spin == 50us);  // more left than the policy spends: unchanged
    CHECK(policy.within(1s).yield == 200us);
    CHECK(policy.within(100us).spin == 50us);  // the yield is cut to the rest
    CHECK(policy.within(100us).yield == 50us);
    CHECK(policy.within(20us).spin == 20us);
    CHECK(policy.within(20us).yield == 0us);
    CHECK(policy.within(0ns).total() == 0ns);
}

TEST_CASE("Doorbell: ring and drain", "[wait]") {
    SocketPair sp;
    size_t count = 99;
    CHECK(drain_doorbells(sp.fd[1], count) == DrainResult::Drained);
    CHECK(count == 0);

    CHECK(ring_doorbell(sp.fd[0]));
    pollfd pfd{sp.fd[1], POLLIN, 0};
    CHECK(::poll(&pfd, 1, 1000) == 1);
    CHECK(drain_doorbells(sp.fd[1], count) == DrainResult::Drained);
    CHECK(count == 1);
    CHECK(drain_doorbells(sp.fd[1], count) == DrainResult::Drained);
    CHECK(count == 0);

    // Each 1-byte send costs a whole skb of socket buffer: stay well below the limit.
    for (int i = 0; i < 50; ++i)
        REQUIRE(ring_doorbell(sp.fd[0]));
    CHECK(drain_doorbells(sp.fd[1], count) == DrainResult::Drained);
    CHECK(count == 50);
    // Beyond it, further doorbells are coalesced (EAGAIN counts as rung).
    for (int i = 0; i < 5000; ++i)
        REQUIRE(ring_doorbell(sp.fd[0]));
    CHECK(drain_doorbells(sp.fd[1], count) == DrainResult::Drained);
    CHECK(count >= 1);
    CHECK(count <= 5000);

    // Both directions are independent.
    CHECK(ring_doorbell(sp.fd[1]));
    CHECK(drain_doorbells(sp.fd[1], count) == DrainResult::Drained);
    CHECK(count == 0);
    CHECK(drain_doorbells(sp.fd[0], count) == DrainResult::Drained);
    CHECK(count == 1);
}

TEST_CASE("Doorbell: draining stops at the budget", "[wait]") {
    SocketPair sp;
    const char bytes[1000] = {};
    REQUIRE(::send(sp.fd[0], bytes, sizeof bytes, 0) == static_cast<ssize_t>(sizeof bytes));
    size_t count = 0;
    CHECK(drain_doorbells(sp.fd[1], count, 300) == DrainResult::Drained);
    CHECK(count == 300);
    // The rest is still queued: a level-triggered poller sees the socket readable.
    pollfd pfd{sp.fd[1], POLLIN, 0};
    CHECK(::poll(&pfd, 1, 0) == 1);
    CHECK(drain_doorbells(sp.fd[1], count, 600) == DrainResult::Drained);
    CHECK(count == 600);
    CHECK(drain_doorbells(sp.fd[1], count) == DrainResult::Drained);
    CHECK(count == 100);
}

TEST_CASE("Doorbell: peer closed", "[wait]") {
    SocketPair sp;
    CHECK(ring_doorbell(sp.fd[0]));
    CHECK(ring_doorbell(sp.fd[0]));
    sp.close(0);
    size_t count = 0;
    // Queued bytes are counted before the end of the stream is reported.
    CHECK(drain_doorbells(sp.fd[1], count) == DrainResult::PeerClosed);
    CHECK(count == 2);
    CHECK(drain_doorbells(sp.fd[1], count) == DrainResult::PeerClosed);
    CHECK(count == 0);

    // Ringing a closed peer fails (no SIGPIPE: we are still alive) and keeps errno.
    errno = 1234;
    CHECK_FALSE(ring_doorbell(sp.fd[1]));
    CHECK(errno == 1234);
}

TEST_CASE("Doorbell: full socket buffer still counts as rung", "[wait]") {
    SocketPair sp;
    const int small = 4096;
    ::setsockopt(sp.fd[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    std::vector<char> junk(65536, 1);
    size_t queued = 0;
    for (;;) {
        const ssize_t n = ::send(sp.fd[0], junk.data(), junk.size(), MSG_DONTWAIT);
        if (n < 0) {
            REQUIRE((errno == EAGAIN || errno == EWOULDBLOCK));
            break;
        }
        queued += static_cast<size_t>(n);
        REQUIRE(queued < (size_t{256} << 20));
    }
    // Fill up the last scraps with single bytes.
    while (::send(sp.fd[0], junk.data(), 1, MSG_DONTWAIT) == 1)
        ++queued;
    errno = 0;
    CHECK(ring_doorbell(sp.fd[0]));
    CHECK(errno == 0);
    CHECK(ring_doorbell(sp.fd[0]));
    size_t count = 0;
    CHECK(drain_doorbells(sp.fd[1], count) == DrainResult::Drained);
    CHECK(count >= queued);
}

TEST_CASE("Doorbell: errors", "[wait]") {
    int p[2];
    REQUIRE(::pipe(p) == 0);
    size_t count = 0;
    // Not a socket.
    CHECK(drain_doorbells(p[0], count) == DrainResult::Error);
    CHECK_FALSE(ring_doorbell(p[1]));
    ::close(p[0]);
    ::close(p[1]);
    CHECK(drain_doorbells(p[0], count) == DrainResult::Error);
}

TEST_CASE("spin_then_yield", "[wait]") {
    using namespace std::chrono;
    int calls = 0;
    CHECK(spin_then_yield([&] { return ++calls > 0; }, WaitPolicy{}));
    CHECK(calls == 1);

    calls = 0;
    CHECK(spin_then_yield([&] { return ++calls >= 1000; }, WaitPolicy{seconds(10), seconds(10)}));
    CHECK(calls == 1000);

    // Never ready: returns false once the budget is spent.
    for (const WaitPolicy budget :
         {WaitPolicy{nanoseconds(0), nanoseconds(0)}, WaitPolicy{microseconds(1), microseconds(5)},
          WaitPolicy{milliseconds(2), milliseconds(3)}}) {
        const auto start = steady_clock::now();
        CHECK_FALSE(spin_then_yield([] { return false; }, budget));
        const auto took = steady_clock::now() - start;
        CHECK(took >= budget.spin + budget.yield);
        CHECK(took < seconds(2));
    }
}

TEST_CASE("spin_then_yield with no budget checks once and gives up", "[wait]") {
    int calls = 0;
    CHECK_FALSE(spin_then_yield(
        [&] {
            ++calls;
            return false;
        },
        WaitPolicy::none()));
    CHECK(calls == 1);
}

TEST_CASE("AdaptiveSpin: spins while waits are short, blocks when they are long", "[wait]") {
    using std::chrono::microseconds;
    const WaitPolicy configured{microseconds(50), microseconds(200)};
    AdaptiveSpin spin;
    CHECK(spin.budget(configured).total() == configured.total());

    // Waits of 2 ms (a loaded machine): the average passes 250 us and spinning stops.
    int long_waits = 0;
    while (spin.budget(configured).total().count() != 0) {
        spin.record(microseconds(2000), configured);
        REQUIRE(++long_waits < 20);
    }
    CHECK(long_waits >= 2);  // one slow answer alone does not switch spinning off

    // Samples are capped at twice the budget, so a run of quick answers brings it back
    // within a bounded number of waits, however long the idle period was.
    for (int i = 0; i < 100; ++i)
        spin.record(std::chrono::seconds(10), configured);
    int short_waits = 0;
    while (spin.budget(configured).spin.count() == 0) {
        spin.record(microseconds(20), configured);
        REQUIRE(++short_waits < 40);
    }
    CHECK(spin.budget(configured).total() == configured.total());

    // Waits of 120 us (answers arrive while yielding, e.g. the peer shares our CPU):
    // the spin phase is skipped, the yield phase kept.
    for (int i = 0; i < 60; ++i)
        spin.record(microseconds(120), configured);
    CHECK(spin.budget(configured).spin.count() == 0);
    CHECK(spin.budget(configured).yield == configured.yield);

    spin.record(std::chrono::seconds(1), configured);
    spin.reset();
    CHECK(spin.budget(configured).total() == configured.total());
}
