// transport/wait/deadline.hpp: the one rounding rule for poll() timeouts.
#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <limits>

#include "transport/wait/deadline.hpp"

using namespace std::chrono_literals;
using l5pg::wait::Deadline;

TEST_CASE("deadline: poll()'s timeout, rounded up, -1 for never, 0 once passed") {
    using clock = Deadline::clock;
    CHECK(Deadline::never().poll_ms() == -1);
    CHECK_FALSE(Deadline::never().passed());
    CHECK(Deadline::after(-1ms).passed());
    // poll() must never come back before the deadline: what is left is rounded up.
    CHECK(Deadline::poll_ms_for(1500us) == 2);
    CHECK(Deadline::poll_ms_for(1ms) == 1);
    CHECK(Deadline::poll_ms_for(1ns) == 1);
    CHECK(Deadline::poll_ms_for(clock::duration::zero()) == 0);
    CHECK(Deadline::poll_ms_for(-1ns) == 0);
    CHECK(Deadline::poll_ms_for(1000h) == std::numeric_limits<int>::max());  // not wrapped
}

TEST_CASE("deadline: what is left, nothing for never") {
    CHECK_FALSE(Deadline::never().left().has_value());
    CHECK(Deadline::after(-1ms).left() == Deadline::clock::duration::zero());
    const auto left = Deadline::after(1h).left();
    REQUIRE(left.has_value());
    CHECK(*left > 59min);
    CHECK(*left <= 1h);
}

TEST_CASE("deadline: wait_ready answers ready, or times out with ETIMEDOUT") {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    CHECK(l5pg::wait::wait_ready(fds[0], POLLOUT, Deadline::after(1s)) == 1);
    const auto start = std::chrono::steady_clock::now();
    const int rc = l5pg::wait::wait_ready(fds[0], POLLIN, Deadline::after(20ms));
    const int err = errno;
    CHECK(rc == 0);
    CHECK(err == ETIMEDOUT);
    CHECK(std::chrono::steady_clock::now() - start >= 20ms);
    REQUIRE(::write(fds[1], "x", 1) == 1);
    CHECK(l5pg::wait::wait_ready(fds[0], POLLIN, Deadline::never()) == 1);
    // Readiness wins over a deadline already passed (a connect that finished meanwhile).
    CHECK(l5pg::wait::wait_ready(fds[0], POLLIN, Deadline::after(-1ms)) == 1);
    ::close(fds[0]);
    ::close(fds[1]);
}
