// Several threads may wait on one upgraded connection at once: one in poll() or select()
// for a NOTIFY while another runs a query on it (threads sharing a psycopg2 connection do).
// The end has one wake-up flag per direction (the rings' reader_waiting and writer_waiting),
// which a waiter arms before it sleeps and takes back when its re-check finds the
// connection ready. One thread's taking back would cancel another's arming, and that thread
// would sleep through l5pgd's next answer, as it never does on a socket. So the threads
// inside a wait that armed are counted, per channel and direction:
//   - a flag is taken back only by the last counted waiter, or by an uncounted caller (the
//     readiness invariant for foreign event loops, channel.hpp) only while none waits;
//   - a taking back and a new waiter's counting in do not interleave (kTakingBack), so the
//     new waiter's flag, set after it counted in, is never cleared under it;
//   - l5pgd takes the flag when it rings, and one thread drains the doorbell byte for all
//     (a poll() that wakes to find it gone sleeps on in the kernel): a thread that leaves
//     its wait while others stay arms again for them, and once it has read, asks l5pgd for
//     another doorbell when data is left (SHM: the poke; an RDMA flag is never taken
//     back, so RDMA waiters only lose the doorbell byte);
//   - a waiter woken by a byte leaves it on the socket while another counted thread is
//     ready (doorbell_owed_to_others()), and nothing rings again for room already made:
//     a wait for room looks at the ring every 1-64 ms too (may_miss_doorbell());
//   - a waiter that is not alone arms without its wait's name: l5pgd rings one session per
//     name and round (the name stands for one poll() call), and the other thread's name
//     could otherwise stand on a session it does not poll.
#pragma once

#include <cstdint>

#include "transport/channel_end.hpp"

namespace l5pg::shim {

struct Channel;

// The directions one thread's wait is counted in (a bit per transport::Want); the wait
// keeps it from its first arming to stop_waiting().
using CountedWants = uint8_t;

// Arms `want`, counting the caller in on its wait's first arming. The end's arm() result:
// false means ready already (the caller's re-check sees it).
bool arm_as_waiter(Channel& ch, transport::Want want, uint64_t wait_id, CountedWants& counted);
// Takes the flag back unless another thread is counted as waiting.
void disarm_unless_others_wait(Channel& ch, transport::Want want, CountedWants counted);
// The wait is over: counts the caller out of every direction it was counted in, re-arming
// for the threads still waiting.
void stop_waiting(Channel& ch, CountedWants& counted);
// Whether some thread is counted as waiting for `want` (the caller, done, is not).
[[nodiscard]] bool others_wait(Channel& ch, transport::Want want);
// Whether a wait counted in `counted` may sleep through its doorbell: a wait for room. A
// thread that finds the ring empty, or returns from a call, drains the bytes on the socket
// (the bytes of a wait for data and of one for room cannot be told apart), and nothing rings
// again for room already made. Such a wait looks at the ring now and then
// (doorbell_relook.hpp).
[[nodiscard]] bool may_miss_doorbell(CountedWants counted);
// Whether a waiter woken by a doorbell byte leaves it on the socket: another thread counted
// as waiting is ready now, so the byte may be that thread's, whose poll() would find it
// drained and sleep on (in the kernel) for ever. That thread drains it. SHM only: an RDMA
// end's readiness is asked by the thread that uses it.
[[nodiscard]] bool doorbell_owed_to_others(Channel& ch, CountedWants counted);
// After the caller drained the socket: when another thread counted as waiting for data finds
// some, its doorbell may have been among the bytes (one that came after the caller's look
// at doorbell_owed_to_others()): asks l5pgd for another (SHM's poke). SHM only.
void ring_again_for_others(Channel& ch, int fd, CountedWants counted);

}  // namespace l5pg::shim
