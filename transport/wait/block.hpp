// The blocking wait, written once (L5 §III-A-3, docs/wire-format.md section 3): spin, yield, arm
// the waiting flag, re-check, block on the doorbell socket, drain it, and round again. Used by the
// shim's channel over any end (clientlib/channel.cpp) and its poll() over several fds
// (clientlib/interpose_poll.cpp), the RDMA client channel's own waits
// (rdma/channel/client.cpp), l5pgd's worker (daemon/worker.cpp: it spins and yields between
// polling rounds itself, then arms every session and blocks in libevent through this), the
// microbenchmark and the lost-wake-up stress test, so that test checks the code that ships.
//
// No lost wake-up (Dekker): the waiter arms its flag, issues a seq_cst fence (the rings'
// arm(); for RDMA: its flag WRITE into the peer's memory has completed) and re-reads the
// ring before blocking; the other side publishes, issues a seq_cst fence and reads the
// flag. With both fences, at least one of them sees the other's store: either the waiter sees
// the new data and does not block, or the publisher sees the flag and writes a doorbell
// byte to the socket, which makes the blocked poll() return. The flag and its orderings
// belong to the waiter (shm/ring.cpp, rdma/channel/client.cpp); the order of the steps,
// which the argument needs just as much, is here.
#pragma once

#include <concepts>

#include "transport/wait/policy.hpp"
#include "transport/wait/spin.hpp"

namespace l5pg::wait {

// What a waiter's sleep() (block on the doorbell, then drain it) tells the wait.
enum class Woken {
    Again,  // woken (a doorbell, a spurious wake-up, EINTR to retry): wait on
    Look,   // stop waiting without ready(): the caller looks (the peer closed, timeout)
    Stop,   // stop waiting: failed (the waiter kept the reason, e.g. errno)
};

// The parts of a wait that differ between its users: the condition, the budget of each
// round (it may change between rounds: AdaptiveSpin, placement hints), the flag, and how
// to sleep on the socket (which poll: the shim's real one, a timeout, a stall check).
template <class W>
concept Waiter = requires(W& w) {
    { w.ready() } -> std::same_as<bool>;
    { w.policy() } -> std::convertible_to<WaitPolicy>;
    // Sets our waiting flag so the peer rings the doorbell when it makes us ready.
    // False: no need to block (found ready while arming, e.g. RDMA, which re-checks once
    // its flag WRITE completed).
    { w.arm() } -> std::same_as<bool>;
    // Takes the flag back after the re-check found the condition true. A doorbell that the
    // peer already owes us is drained by a later sleep() or by the caller.
    w.disarm();
    { w.sleep() } -> std::same_as<Woken>;
};

// Waits until `w.ready()`. True when ready (or Woken::Look), false when sleep() stopped.
template <Waiter W>
[[nodiscard]] bool block_until_ready(W& w) {
    for (;;) {
        if (spin_then_yield([&w] { return w.ready(); }, w.policy()))
            return true;
        // The Dekker re-check: only after arming may an empty ring mean "sleep".
        if (!w.arm() || w.ready()) {
            w.disarm();
            return true;
        }
        switch (w.sleep()) {
            case Woken::Again:
                continue;
            case Woken::Look:
                return true;
            case Woken::Stop:
                return false;
        }
    }
}

}  // namespace l5pg::wait
