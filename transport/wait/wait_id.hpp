// Names of blocking waits, so that a waker rings once per wait rather than once per end.
//
// A client thread that blocks in one poll() over several shared-memory sessions arms every
// one of those sessions' flags under the same name (RingControl::reader_wait_id). l5pgd's
// worker takes the flags as it publishes answers, and rings only the first session it finds
// armed under a name (daemon/doorbell_coalescer.hpp): that one doorbell ends the whole wait,
// and the woken thread looks at every ring before it sleeps again. Without names, a thread
// waiting for 32 sessions got a doorbell from most of those that answered before it ran.
// The same the other way: an l5pgd worker names each block, and a client process rings a
// block once, whichever of its threads takes a flag first (transport/wait/rung_waits.hpp).
//
// Names are unique per process: counted up from a random start, which a forked child draws
// anew (the parent's sessions are not the child's, but the child's new ones may be served by
// the same worker). kUnnamedWait asks for a doorbell every time, as before names existed.
#pragma once

#include <cstdint>

namespace l5pg::wait {

inline constexpr uint64_t kUnnamedWait = 0;

// A fresh name, never kUnnamedWait. Lock-free and async-signal-safe.
[[nodiscard]] uint64_t next_wait_id() noexcept;
// Draws a random start: when the shim is loaded, and in a forked child (pthread_atfork).
void seed_wait_ids() noexcept;

}  // namespace l5pg::wait
