#include <catch2/catch.hpp>

#include <chrono>
#include <string>

#include "daemon/cancel_guess_limiter.hpp"

using l5pg::daemon::CancelGuessLimiter;
using Verdict = CancelGuessLimiter::Verdict;
using namespace std::chrono_literals;

namespace {
const CancelGuessLimiter::clock::time_point t0 = CancelGuessLimiter::clock::now();
}  // namespace

TEST_CASE("cancel guesses: a peer gets its rate's worth of wrong keys, then nothing", "[cancel]") {
    CancelGuessLimiter limiter(100, 3);
    for (int i = 0; i < 3; ++i)
        REQUIRE(limiter.take("uid 1000", t0) == Verdict::LookUp);
    // A right key is held back too: a guess cannot be told from a cancel.
    CHECK(limiter.take("uid 1000", t0) == Verdict::OverPeerCap);
    CHECK(limiter.take("uid 1000", t0 + 100ms) == Verdict::OverPeerCap);
    CHECK(limiter.take("uid 1001", t0 + 100ms) == Verdict::LookUp);
    // One more a third of a second later; a full second's worth after a second.
    CHECK(limiter.take("uid 1000", t0 + 340ms) == Verdict::LookUp);
    CHECK(limiter.take("uid 1000", t0 + 340ms) == Verdict::OverPeerCap);
    for (int i = 0; i < 3; ++i)
        CHECK(limiter.take("uid 1000", t0 + 10s) == Verdict::LookUp);
    CHECK(limiter.take("uid 1000", t0 + 10s) == Verdict::OverPeerCap);
}

TEST_CASE("cancel guesses: right keys cost nothing", "[cancel]") {
    CancelGuessLimiter limiter(2, 2);
    for (int i = 0; i < 1000; ++i) {
        REQUIRE(limiter.take("127.0.0.1", t0) == Verdict::LookUp);
        limiter.refund("127.0.0.1");
    }
    CHECK(limiter.take("127.0.0.1", t0) == Verdict::LookUp);
    CHECK(limiter.take("127.0.0.1", t0) == Verdict::LookUp);
    CHECK(limiter.take("127.0.0.1", t0) == Verdict::OverPeerCap);
}

TEST_CASE("cancel guesses: the total caps many peers together", "[cancel]") {
    CancelGuessLimiter limiter(5, 3);
    for (int i = 0; i < 3; ++i)
        REQUIRE(limiter.take("10.0.0.1", t0) == Verdict::LookUp);
    for (int i = 0; i < 2; ++i)
        REQUIRE(limiter.take("10.0.0.2", t0) == Verdict::LookUp);
    CHECK(limiter.take("10.0.0.2", t0) == Verdict::OverTotalCap);
    CHECK(limiter.take("10.0.0.3", t0) == Verdict::OverTotalCap);
    CHECK(limiter.take("10.0.0.3", t0 + 200ms) == Verdict::LookUp);
}

TEST_CASE("cancel guesses: peers whose buckets filled again are forgotten", "[cancel]") {
    CancelGuessLimiter limiter(1'000'000, 10);
    for (int i = 0; i < 5000; ++i)
        REQUIRE(limiter.take("10.1." + std::to_string(i), t0) == Verdict::LookUp);
    CHECK(limiter.peers_held() == 5000);  // all sent a wrong key this very moment
    // Seconds later their buckets are full again: a sweep as new peers come drops them.
    for (int i = 0; i < 4000; ++i)
        REQUIRE(limiter.take("10.2." + std::to_string(i), t0 + 2s) == Verdict::LookUp);
    CHECK(limiter.peers_held() <= 4000);
    CHECK(limiter.take("10.1.7", t0 + 2s) == Verdict::LookUp);
}

TEST_CASE("cancel guesses: lower rates on a reload apply to what is in the buckets", "[cancel]") {
    CancelGuessLimiter limiter(100, 10);
    REQUIRE(limiter.take("uid 0", t0) == Verdict::LookUp);
    limiter.set_rates(100, 1);
    CHECK(limiter.per_peer_rate() == 1);
    CHECK(limiter.take("uid 0", t0) == Verdict::LookUp);
    CHECK(limiter.take("uid 0", t0) == Verdict::OverPeerCap);
    CHECK(limiter.take("uid 0", t0 + 1s) == Verdict::LookUp);
}
