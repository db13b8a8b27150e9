// The order of block_until_ready()'s steps, with a scripted waiter: the Dekker argument
// (transport/wait/block.hpp) needs arm before the re-check and the re-check before sleep.
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "transport/wait/block.hpp"

using namespace l5pg::wait;

namespace {

// ready() answers from `readiness` in turn (then false); sleep() from `wakes` (then Stop).
// Every call is appended to `log`.
struct ScriptedWaiter {
    ScriptedWaiter(std::vector<bool> ready_answers, std::vector<Woken> sleep_answers)
        : readiness(std::move(ready_answers)), wakes(std::move(sleep_answers)) {}

    std::vector<bool> readiness;
    std::vector<Woken> wakes;
    bool arm_result = true;
    std::string log;
    size_t ready_calls = 0;
    size_t sleeps = 0;

    bool ready() {
        const bool r = ready_calls < readiness.size() && readiness[ready_calls];
        ++ready_calls;
        log += r ? 'R' : 'r';
        return r;
    }
    WaitPolicy policy() const { return WaitPolicy::none(); }
    bool arm() {
        log += 'A';
        return arm_result;
    }
    void disarm() { log += 'D'; }
    Woken sleep() {
        log += 'S';
        return sleeps < wakes.size() ? wakes[sleeps++] : Woken::Stop;
    }
};

static_assert(Waiter<ScriptedWaiter>);

}  // namespace

TEST_CASE("block_until_ready: ready at once never arms", "[wait]") {
    ScriptedWaiter w{{true}, {}};
    CHECK(block_until_ready(w));
    CHECK(w.log == "R");
}

TEST_CASE("block_until_ready: the re-check after arming wins, and disarms", "[wait]") {
    ScriptedWaiter w{{false, true}, {}};
    CHECK(block_until_ready(w));
    CHECK(w.log == "rARD");
}

TEST_CASE("block_until_ready: an arm that finds the peer ready does not sleep", "[wait]") {
    ScriptedWaiter w{{false}, {}};
    w.arm_result = false;
    CHECK(block_until_ready(w));
    CHECK(w.log == "rAD");
}

TEST_CASE("block_until_ready: sleeps only after arm and re-check, then rounds again", "[wait]") {
    ScriptedWaiter w{{false, false, false, true}, {Woken::Again}};
    CHECK(block_until_ready(w));
    CHECK(w.log == "rArSrARD");
}

TEST_CASE("block_until_ready: Look ends the wait as ready, Stop as failed", "[wait]") {
    ScriptedWaiter look{{}, {Woken::Look}};
    CHECK(block_until_ready(look));
    CHECK(look.log == "rArS");
    ScriptedWaiter stop{{}, {Woken::Again, Woken::Stop}};
    CHECK_FALSE(block_until_ready(stop));
    CHECK(stop.log == "rArSrArS");
}

TEST_CASE("WaitPolicy: spin, then yield, then block", "[wait]") {
    using std::chrono::microseconds;
    const WaitPolicy p = WaitPolicy::from_us(50, 200);
    CHECK(p.phase_after(microseconds(0)) == Phase::Spin);
    CHECK(p.phase_after(microseconds(49)) == Phase::Spin);
    CHECK(p.phase_after(microseconds(50)) == Phase::Yield);
    CHECK(p.phase_after(microseconds(249)) == Phase::Yield);
    CHECK(p.phase_after(microseconds(250)) == Phase::Block);
    CHECK(WaitPolicy::none().phase_after(microseconds(0)) == Phase::Block);
    CHECK(WaitPolicy::from_us(0, 10).phase_after(microseconds(0)) == Phase::Yield);
    CHECK(WaitPolicy{}.spin == microseconds(kDefaultSpinUs));
    CHECK(WaitPolicy{}.yield == microseconds(kDefaultYieldUs));
}
