// What the shim knows about each file descriptor, in a lock-free table indexed by fd:
// one atomic word per fd, so the hot path (every send/recv/poll of the application)
// costs one load, and close/connect stay async-signal-safe (PQcancel runs them in
// signal handlers). Descriptors >= kMaxTrackedFd are never upgraded.
#pragma once

#include <cstdint>

namespace l5pg::shim {

struct Channel;

inline constexpr int kMaxTrackedFd = 65536;

enum class FdKind {
    Untracked,      // not ours: every call goes straight to libc
    Candidate,      // connected to an l5pgd Unix socket, upgrade decided at the first send
    RdmaCandidate,  // TCP connection to a port in L5PG_RDMA_PORTS (L5PG_TRANSPORT=rdma)
    Upgrading,      // a candidate whose first send is asking l5pgd for the upgrade now
    Forked,         // upgraded in the parent before fork(): EOF/EPIPE here, rings untouched
    Upgraded,       // bytes go through a Channel
};

struct FdEntry {
    FdKind kind = FdKind::Untracked;
    Channel* channel = nullptr;  // Upgraded only
};

[[nodiscard]] FdEntry fd_lookup(int fd);
// The highest fd that was ever tracked (-1: none): no fd above it is or was ours.
[[nodiscard]] int fd_highest_tracked();
// At load and in a forked child: this process owns the table. In a process that does not
// (a vfork() child, in its parent's memory) the calls below leave tracked entries alone and
// fd_forget() returns Untracked: the child's fds are plain copies of the parent's.
void fd_table_take_ownership();
void fd_set_candidate(int fd);
void fd_set_rdma_candidate(int fd);
// The first send's claim on a candidate: Candidate or RdmaCandidate -> Upgrading. False when
// another thread got there first (its own first send, a dup(), a close()).
[[nodiscard]] bool fd_claim_for_upgrade(int fd);
// Upgrading -> Upgraded; false if the entry changed meanwhile (closed by another thread).
[[nodiscard]] bool fd_attach_channel(int fd, Channel& channel);
// Upgrading -> Untracked: the upgrade was declined or failed; the socket is a socket.
void fd_abandon_upgrade(int fd);
// Waits (sleeping, async-signal-safe) while another thread's upgrade of `fd` is under way,
// at most a few upgrade timeouts. False if it still is.
[[nodiscard]] bool fd_await_upgrade(int fd);
// Returns the previous entry and leaves the fd Untracked. The caller owns the
// reference the entry held (see channel_release).
FdEntry fd_forget(int fd);
// `to` becomes a duplicate of `from` (dup/dup2/dup3/F_DUPFD). The previous entry of
// `to` is released, as the kernel implicitly closed it. A candidate duplicated before its
// first message is no longer one (both stay plain sockets); one duplicated while its first
// message asks for the upgrade gets the upgrade's outcome (fd_await_upgrade).
void fd_duplicate(int from, int to);
// In a forked child: every upgraded fd, and every one being upgraded, becomes Forked.
void fd_mark_all_forked();

}  // namespace l5pg::shim
