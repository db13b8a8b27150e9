#include "clientlib/end_waiters.hpp"

#include <atomic>

#include "clientlib/channel.hpp"
#include "transport/wait/spin.hpp"
#include "transport/wait/wait_id.hpp"

namespace l5pg::shim {
namespace {

using transport::Want;

// The count word: waiters in the low bits, kTakingBack while the last one (or an uncounted
// caller) takes the flag back.
constexpr uint32_t kTakingBack = uint32_t{1} << 31;
constexpr uint32_t kCountMask = kTakingBack - 1;
// A taking back lasts a few instructions. Only a signal handler's poll() interrupting it in
// the same thread could wait for ever; after this many rounds it goes on (and at worst its
// flag is cleared: a wake-up lost as before the count existed).
constexpr int kMaxTakingBackRounds = 1 << 16;

std::atomic<uint32_t>& count_word(Channel& ch, Want want) noexcept {
    return ch.waiters[want == Want::Read ? 0 : 1];
}

CountedWants bit(Want want) noexcept {
    return want == Want::Read ? 1 : 2;
}

// Counts the caller in once no taking back is under way; returns how many were counted
// before it. Acquire: the taking back's clearing of the flag happens before our arming.
uint32_t count_in(std::atomic<uint32_t>& word) noexcept {
    uint32_t seen = word.load(std::memory_order_acquire);
    for (int rounds = 0;;) {
        if ((seen & kTakingBack) != 0 && rounds < kMaxTakingBackRounds) {
            ++rounds;
            wait::cpu_relax();
            seen = word.load(std::memory_order_acquire);
            continue;
        }
        if (word.compare_exchange_weak(seen, seen + 1, std::memory_order_acq_rel,
                                       std::memory_order_acquire))
            return seen & kCountMask;
    }
}

}  // namespace

bool arm_as_waiter(Channel& ch, Want want, uint64_t wait_id, CountedWants& counted) noexcept {
    std::atomic<uint32_t>& word = count_word(ch, want);
    uint32_t others = 0;
    if ((counted & bit(want)) == 0) {
        others = count_in(word);
        counted = static_cast<CountedWants>(counted | bit(want));
    } else {
        others = (word.load(std::memory_order_acquire) & kCountMask) - 1;
    }
    return ch.end->arm(want, others == 0 ? wait_id : wait::kUnnamedWait);
}

void disarm_unless_others_wait(Channel& ch, Want want, CountedWants counted) noexcept {
    std::atomic<uint32_t>& word = count_word(ch, want);
    uint32_t alone = (counted & bit(want)) != 0 ? 1 : 0;
    if (!word.compare_exchange_strong(alone, alone | kTakingBack, std::memory_order_acq_rel,
                                      std::memory_order_relaxed))
        return;  // another thread waits: the flag is its too
    ch.end->disarm(want);
    word.fetch_and(~kTakingBack, std::memory_order_release);
}

void stop_waiting(Channel& ch, CountedWants& counted) noexcept {
    for (const Want want : {Want::Read, Want::Write}) {
        if ((counted & bit(want)) != 0)
            count_word(ch, want).fetch_sub(1, std::memory_order_acq_rel);
    }
    counted = 0;
}

}  // namespace l5pg::shim
