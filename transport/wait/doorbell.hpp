// The doorbell: one byte on the session socket that wakes a peer blocked in poll() or
// epoll (block.hpp). Shared by the SHM and RDMA channels, both ends.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/wait/passed_fds.hpp"

namespace l5pg::wait {

// Writes one doorbell byte (MSG_DONTWAIT|MSG_NOSIGNAL). A full socket buffer already
// means the peer has a pending wake-up, so EAGAIN counts as success. Returns false only
// when the peer is gone (EPIPE/ECONNRESET/...). Async-signal-safe.
[[nodiscard]] bool ring_doorbell(int sock) noexcept;

enum class DrainResult { Drained, PeerClosed, Error };
// Reads and discards the doorbell bytes currently queued (non-blocking), at most `budget`
// of them: a peer writing doorbells in a loop must not keep one caller (l5pgd's worker)
// draining for ever. `count` gets the number of bytes discarded; count == budget means
// more may be queued. PeerClosed when recv returns 0. With `passed` (empty), descriptors the
// peer attached to the bytes are taken into it rather than closed here (passed_fds.hpp),
// and the drain stops at them (Drained, `passed` not empty).
[[nodiscard]] DrainResult drain_doorbells(int sock, size_t& count, size_t budget = SIZE_MAX,
                                          PassedFds* passed = nullptr) noexcept;

}  // namespace l5pg::wait
