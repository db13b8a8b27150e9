#include "clientlib/end_waiters.hpp"

#include <sched.h>

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
constexpr uint32_t kRelaxRoundsPerYield = 64;

// The count word whose flag this thread is taking back: a signal handler's poll() that
// interrupts it on the same connection must not wait for it (it cannot finish before the
// handler returns). Lock-free atomic, so a handler may read it; set before the taking
// back's compare-and-swap and cleared after its end, so no instant escapes it.
thread_local std::atomic<const std::atomic<uint32_t>*> t_taking_back{nullptr};

std::atomic<uint32_t>& count_word(Channel& ch, Want want) {
    return ch.waiters[want == Want::Read ? 0 : 1];
}

CountedWants bit(Want want) {
    return want == Want::Read ? 1 : 2;
}

// Counts the caller in once no taking back is under way (another thread's may be preempted
// in its few instructions: yield to it); returns how many were counted before it.
// Sequentially consistent, as are the taking back and the re-read in arm_as_waiter(): the
// flag's clearing happens before our arming, and our count is seen by a later arming.
uint32_t count_in(std::atomic<uint32_t>& word) {
    uint32_t seen = word.load(std::memory_order_seq_cst);
    for (uint32_t rounds = 1;; ++rounds) {
        if ((seen & kTakingBack) != 0 && t_taking_back.load(std::memory_order_relaxed) != &word) {
            if (rounds % kRelaxRoundsPerYield == 0)
                (void)::sched_yield();
            else
                wait::cpu_relax();
            seen = word.load(std::memory_order_seq_cst);
            continue;
        }
        if (word.compare_exchange_weak(seen, seen + 1, std::memory_order_seq_cst))
            return seen & kCountMask;
    }
}

}  // namespace

bool arm_as_waiter(Channel& ch, Want want, uint64_t wait_id, CountedWants& counted) {
    std::atomic<uint32_t>& word = count_word(ch, want);
    uint32_t others = 0;
    if ((counted & bit(want)) == 0) {
        others = count_in(word);
        counted = static_cast<CountedWants>(counted | bit(want));
    } else {
        others = (word.load(std::memory_order_seq_cst) & kCountMask) - 1;
    }
    const bool armed = ch.end->arm(want, others == 0 ? wait_id : wait::kUnnamedWait);
    // A thread that counted in after our count and armed unnamed before our named arming
    // landed would be under our name now: arm again, unnamed. (One that counts in after this
    // re-read arms after it, unnamed.) An unnamed arming has nothing to undo.
    if (others == 0 && wait_id != wait::kUnnamedWait &&
        (word.load(std::memory_order_seq_cst) & kCountMask) > 1)
        return ch.end->arm(want, wait::kUnnamedWait);
    return armed;
}

void disarm_unless_others_wait(Channel& ch, Want want, CountedWants counted) {
    std::atomic<uint32_t>& word = count_word(ch, want);
    uint32_t alone = (counted & bit(want)) != 0 ? 1 : 0;
    // A signal handler's wait runs this too: put back the marker of what it interrupted.
    const std::atomic<uint32_t>* interrupted = t_taking_back.load(std::memory_order_relaxed);
    t_taking_back.store(&word, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (word.compare_exchange_strong(alone, alone | kTakingBack, std::memory_order_seq_cst)) {
        ch.end->disarm(want);
        word.fetch_and(~kTakingBack, std::memory_order_seq_cst);
    }  // else another thread waits: the flag is its too
    std::atomic_signal_fence(std::memory_order_seq_cst);
    t_taking_back.store(interrupted, std::memory_order_relaxed);
}

bool others_wait(Channel& ch, Want want) {
    return (count_word(ch, want).load(std::memory_order_seq_cst) & kCountMask) != 0;
}

bool may_miss_doorbell(CountedWants counted) {
    return (counted & bit(Want::Write)) != 0;
}

void ring_again_for_others(Channel& ch, int fd, CountedWants counted) {
    if (ch.rdma)
        return;
    const uint32_t mine = (counted & bit(Want::Read)) != 0 ? 1 : 0;
    const uint32_t waiting =
        count_word(ch, Want::Read).load(std::memory_order_seq_cst) & kCountMask;
    if (waiting > mine && ch.end->ready(Want::Read))
        ch.end->prepare_for_foreign_wait(fd, /*room_awaited=*/true);  // drains nothing, pokes
}

bool doorbell_owed_to_others(Channel& ch, CountedWants counted) {
    if (ch.rdma)
        return false;
    for (const Want want : {Want::Read, Want::Write}) {
        const uint32_t mine = (counted & bit(want)) != 0 ? 1 : 0;
        const uint32_t waiting = count_word(ch, want).load(std::memory_order_seq_cst) & kCountMask;
        if (waiting > mine && ch.end->ready(want))
            return true;
    }
    return false;
}

// l5pgd takes a flag when it rings, and the doorbell byte may have been drained by the
// thread that leaves now, while another sleeps on (its poll() found nothing when it looked):
// arm again for those still counted. Data already waiting is most likely the leaver's own,
// which it reads next; what it leaves unread gets the others a doorbell then (the caller's
// prepare_return(), channel.cpp, with others_wait()).
void stop_waiting(Channel& ch, CountedWants& counted) {
    for (const Want want : {Want::Read, Want::Write}) {
        if ((counted & bit(want)) == 0)
            continue;
        const uint32_t before = count_word(ch, want).fetch_sub(1, std::memory_order_seq_cst);
        if ((before & kCountMask) > 1)
            (void)ch.end->arm(want, wait::kUnnamedWait);
    }
    counted = 0;
}

}  // namespace l5pg::shim
