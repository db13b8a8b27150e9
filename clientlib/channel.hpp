// One upgraded connection: its end (transport/channel_end.hpp: the shared-memory rings,
// shm_end.cpp, or an RDMA channel, rdma_end.cpp) and the byte-stream semantics the
// application expects from the socket it still holds (partial reads and writes, EAGAIN,
// blocking, EOF, EPIPE), written once in channel.cpp for every kind of end.
//
// Channels live in a fixed pool (no heap in the shim's I/O paths); an fd table entry
// holds one reference, dup() adds one, close() drops one.
//
// Readiness invariant for event loops we do not interpose (epoll: asyncio, psycopg 3):
// whenever a call returns to the application, either the server->client ring is empty
// and its reader_waiting flag is armed (so l5pgd rings the doorbell when it publishes),
// or the ring holds data and a doorbell byte is pending or requested ("poke": we send
// one byte to l5pgd, which answers with one while data is unread). Either way the
// socket becomes readable exactly when recv() would return data. Kept only once the
// process has used epoll on a socket that may be ours (foreign_waiters.hpp): it costs
// l5pgd a doorbell byte per response.
#pragma once

#include <poll.h>

#include <sys/types.h>
#include <sys/uio.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "clientlib/end_waiters.hpp"
#include "clientlib/rdma_end.hpp"
#include "clientlib/shm_end.hpp"
#include "transport/channel_end.hpp"
#include "transport/wait/adaptive_spin.hpp"
#include "transport/wait/policy.hpp"

namespace l5pg::shim {

inline constexpr uint32_t kMaxChannels = 4096;

struct Channel {
    std::atomic<uint32_t> in_use{0};
    std::atomic<uint32_t> refs{0};
    std::atomic<bool> nonblocking{false};  // O_NONBLOCK of the socket, tracked via fcntl
    wait::AdaptiveSpin spin;               // whether waiting on this connection should spin
    // Threads in a wait that armed, for Want::Read and Want::Write (end_waiters.hpp).
    std::array<std::atomic<uint32_t>, 2> waiters{};
    int transport = 0;       // L5PG_TRANSPORT_*, for l5pg_fd_transport()
    bool said_gone = false;  // EOF or breakage logged (L5PG_DEBUG) already
    // RDMA: the thread that last used the end (thread_mark() in channel.cpp), which an
    // epoll_ctl() on another thread must leave it to (channel_prepare_for_foreign_wait()).
    std::atomic<uintptr_t> last_user{0};
    transport::ChannelEnd* end = nullptr;  // one of the two below, or a unit test's own
    std::optional<ShmEnd> shm;
    std::optional<RdmaEnd> rdma;
};

// Pool management (async-signal-safe, lock-free).
[[nodiscard]] Channel* channel_acquire(shm::Segment segment, bool nonblocking);
// Takes `rdma` over on success; nullptr (and `rdma` still the caller's) when full.
[[nodiscard]] Channel* channel_acquire_rdma(std::unique_ptr<rdma::ClientChannel>& rdma,
                                            bool nonblocking);
// An end the caller owns and keeps alive until the channel is released (unit tests).
[[nodiscard]] Channel* channel_acquire_end(transport::ChannelEnd& end, int transport,
                                           bool nonblocking);
[[nodiscard]] Channel* channel_at(uint32_t index);
[[nodiscard]] uint32_t channel_index(const Channel& channel);
// Takes a reference if the channel still has one (it is not being freed); false otherwise.
// (dup() of its fd, a call in flight: channel_ref.hpp.)
[[nodiscard]] bool channel_try_add_ref(Channel& channel);
// Drops one reference; the last one tells l5pgd we are gone (client_closed), destroys
// the end (unmaps, tears the queue pair down) and frees the slot. Call before closing the socket
// itself; `closing_fd` is that socket when the caller is about to close it (see quiesce_socket() in
// channel.cpp).
void channel_release(Channel& channel, int closing_fd = -1);
// nanosleep() for a short pause inside an interposed call, errno untouched.
void pause_keeping_errno(long nanoseconds);
// In a forked child: unmap every channel (the child's copy only) and free the pool.
void channel_forget_all_after_fork();

// Byte-stream I/O. `flags` are MSG_* flags; results and errno as send(2)/recv(2).
// `nosignal` false means a write to a closed peer raises SIGPIPE, as the socket would.
// The bytes `iov` names in all (valid_iov in interpose_io.cpp has bounded the sum).
[[nodiscard]] size_t iov_total(const iovec* iov, int iovcnt);
[[nodiscard]] ssize_t channel_send(Channel& ch, int fd, const iovec* iov, int iovcnt, int flags,
                                   bool nosignal);
[[nodiscard]] ssize_t channel_recv(Channel& ch, int fd, const iovec* iov, int iovcnt, int flags);
// recv(MSG_TRUNC) as TCP answers it (tcp(7)): reads `len` bytes as channel_recv would, the
// other flags included, and discards them.
[[nodiscard]] ssize_t channel_recv_discarding(Channel& ch, int fd, size_t len, int flags);

// ioctl(FIONREAD): the bytes a recv() would return now (ChannelEnd::unread_bytes()). An RDMA
// end is not thread-safe: asked from another thread than the one using it, 0.
[[nodiscard]] size_t channel_unread_bytes(Channel& ch);

// How long to spin and yield before blocking on this channel: the budget its recent waits
// earned (wait::AdaptiveSpin), or, for SHM, none when it is the `only_session` waited on and
// l5pgd's worker is confined to the very CPU we are confined to (transport/wait/cpu_hint.hpp).
// Publishes our own placement hint on the way. With several sessions in flight on that one CPU,
// yielding hands the CPU to their backends and some answer comes soon: spinning there measured 10 %
// faster than blocking at 8 clients, blocking 80 % faster at 1 (docs/performance.md).
[[nodiscard]] wait::WaitPolicy channel_wait_budget(Channel& ch, bool only_session);

// What a socket reports, as Linux's unix_poll() does: readable is POLLIN | POLLRDNORM,
// writable POLLOUT | POLLWRNORM | POLLWRBAND. poll() keeps those the caller asked for.
inline constexpr short kPollReadable = POLLIN | POLLRDNORM;
inline constexpr short kPollWritable = POLLOUT | POLLWRNORM | POLLWRBAND;

// poll() support: readiness from ring state, those of `events` that hold (kPollReadable,
// kPollWritable, POLLRDHUP), and POLLHUP / POLLERR whatever was asked.
[[nodiscard]] short channel_revents(Channel& ch, short events);
// Arms `events` under the name of the caller's wait (transport/wait/wait_id.hpp), counted
// as a waiter (end_waiters.hpp: stop_waiting() when the wait is over), and takes them back
// unless another thread waits too.
void channel_arm(Channel& ch, short events, uint64_t wait_id, CountedWants& counted);
void channel_disarm(Channel& ch, short events, CountedWants counted);
// Establishes the readiness invariant now (the application just started using epoll).
void channel_prepare_for_foreign_wait(Channel& ch, int fd);
// The socket polled with `revents` for a waiter counted in `counted`: consumes the doorbell
// bytes and notices EOF, or leaves the bytes to another counted thread that is ready now
// (false; end_waiters.hpp, doorbell_owed_to_others()), but never a hang-up or error. After a
// drain, a doorbell that came between that look and the drain may have been another
// waiter's for data: l5pgd is asked for another (ring_again_for_others()).
[[nodiscard]] bool channel_drain_for_waiter(Channel& ch, int fd, short revents,
                                            CountedWants counted);

}  // namespace l5pg::shim
