#include <catch2/catch.hpp>

#include <chrono>
#include <string>

#include "daemon/cancel_guess_limiter.hpp"

using l5pg::daemon::CancelGuessLimiter;
using Verdict = CancelGuessLimiter::Verdict;
using namespace std::chrono_literals;

namespace {

const CancelGuessLimiter::clock::time_point t0 = CancelGuessLimiter::clock::now();

// A CancelRequest with a wrong key: looked up (and charged) or not.
Verdict wrong_key(CancelGuessLimiter& limiter, const std::string& peer,
                  CancelGuessLimiter::clock::time_point now) {
    const Verdict verdict = limiter.admit(peer, now);
    if (verdict == Verdict::LookUp)
        limiter.charge(peer, now);
    return verdict;
}

}  // namespace

TEST_CASE("cancel guesses: a peer gets its rate's worth of wrong keys, then nothing", "[cancel]") {
    CancelGuessLimiter limiter(100, 3);
    for (int i = 0; i < 3; ++i)
        REQUIRE(wrong_key(limiter, "uid 1000", t0) == Verdict::LookUp);
    // A right key is held back too: a guess cannot be told from a cancel.
    CHECK(limiter.admit("uid 1000", t0) == Verdict::OverPeerCap);
    CHECK(limiter.admit("uid 1000", t0 + 100ms) == Verdict::OverPeerCap);
    CHECK(limiter.admit("uid 1001", t0 + 100ms) == Verdict::LookUp);
    // One more a third of a second later; a full second's worth after a second.
    CHECK(wrong_key(limiter, "uid 1000", t0 + 340ms) == Verdict::LookUp);
    CHECK(wrong_key(limiter, "uid 1000", t0 + 340ms) == Verdict::OverPeerCap);
    for (int i = 0; i < 3; ++i)
        CHECK(wrong_key(limiter, "uid 1000", t0 + 10s) == Verdict::LookUp);
    CHECK(wrong_key(limiter, "uid 1000", t0 + 10s) == Verdict::OverPeerCap);
}

TEST_CASE("cancel guesses: right keys cost nothing", "[cancel]") {
    CancelGuessLimiter limiter(1, 1);
    for (int i = 0; i < 1000; ++i)
        REQUIRE(limiter.admit("127.0.0.1", t0) == Verdict::LookUp);
    CHECK(wrong_key(limiter, "127.0.0.1", t0) == Verdict::LookUp);
    CHECK(limiter.admit("127.0.0.1", t0) == Verdict::OverPeerCap);
}

TEST_CASE("cancel guesses: lookups admitted at once and all wrong are paid for later", "[cancel]") {
    CancelGuessLimiter limiter(100, 1);
    // Two workers admit one each before either knows its key is wrong.
    REQUIRE(limiter.admit("uid 7", t0) == Verdict::LookUp);
    REQUIRE(limiter.admit("uid 7", t0) == Verdict::LookUp);
    limiter.charge("uid 7", t0);
    limiter.charge("uid 7", t0);
    CHECK(limiter.admit("uid 7", t0 + 1500ms) == Verdict::OverPeerCap);
    CHECK(limiter.admit("uid 7", t0 + 2100ms) == Verdict::LookUp);
}

TEST_CASE("cancel guesses: a reading of the clock taken before another's credits nothing",
          "[cancel]") {
    CancelGuessLimiter limiter(100, 1);
    REQUIRE(wrong_key(limiter, "uid 9", t0) == Verdict::LookUp);
    // Workers read the clock before taking the lock: readings come in out of order.
    for (int i = 0; i < 10; ++i) {
        CHECK(limiter.admit("uid 9", t0 + 500ms) == Verdict::OverPeerCap);
        CHECK(limiter.admit("uid 9", t0 + 400ms) == Verdict::OverPeerCap);
    }
    CHECK(limiter.admit("uid 9", t0 + 900ms) == Verdict::OverPeerCap);
    CHECK(limiter.admit("uid 9", t0 + 1100ms) == Verdict::LookUp);
}

TEST_CASE("cancel guesses: the total caps many peers together", "[cancel]") {
    CancelGuessLimiter limiter(5, 3);
    for (int i = 0; i < 3; ++i)
        REQUIRE(wrong_key(limiter, "10.0.0.1", t0) == Verdict::LookUp);
    for (int i = 0; i < 2; ++i)
        REQUIRE(wrong_key(limiter, "10.0.0.2", t0) == Verdict::LookUp);
    CHECK(wrong_key(limiter, "10.0.0.2", t0) == Verdict::OverTotalCap);
    CHECK(wrong_key(limiter, "10.0.0.3", t0) == Verdict::OverTotalCap);
    CHECK(wrong_key(limiter, "10.0.0.3", t0 + 250ms) == Verdict::LookUp);
}

TEST_CASE("cancel guesses: peers whose buckets filled again are forgotten", "[cancel]") {
    CancelGuessLimiter limiter(100'000, 10);
    for (int i = 0; i < 5000; ++i)
        REQUIRE(wrong_key(limiter, "10.1." + std::to_string(i), t0) == Verdict::LookUp);
    CHECK(limiter.peers_held() == 5000);  // all sent a wrong key this very moment
    // Seconds later their buckets are full again: a sweep as new peers come drops them.
    for (int i = 0; i < 4000; ++i)
        REQUIRE(wrong_key(limiter, "10.2." + std::to_string(i), t0 + 2s) == Verdict::LookUp);
    CHECK(limiter.peers_held() <= 4000);
    CHECK(wrong_key(limiter, "10.1.7", t0 + 2s) == Verdict::LookUp);
}

TEST_CASE("cancel guesses: lower rates on a reload apply to what is in the buckets", "[cancel]") {
    CancelGuessLimiter limiter(100, 10);
    REQUIRE(wrong_key(limiter, "uid 0", t0) == Verdict::LookUp);
    limiter.set_rates(100, 1);
    CHECK(limiter.per_peer_rate() == 1);
    CHECK(wrong_key(limiter, "uid 0", t0) == Verdict::LookUp);
    CHECK(wrong_key(limiter, "uid 0", t0) == Verdict::OverPeerCap);
    CHECK(wrong_key(limiter, "uid 0", t0 + 1s) == Verdict::LookUp);
}
