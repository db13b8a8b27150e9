// Pieces both upgrade handshakes (upgrade.cpp: SHM, upgrade_rdma.cpp: RDMA) share.
#pragma once

#include <cstddef>

namespace l5pg::shim {

// Only a connection that starts with a startup packet is upgraded; cancel requests never
// are (PQcancel runs in signal handlers and must stay a plain socket). Logs why not.
[[nodiscard]] bool first_packet_may_upgrade(int fd, const std::byte* first, size_t len) noexcept;

// Waits for `events` on fd for at most remaining_ms, then halves remaining_ms, so that a
// loop of short reads or writes, EINTR or spurious wake-ups stays bounded by twice the
// first budget. False with errno set on timeout (ETIMEDOUT) or a poll error.
[[nodiscard]] bool wait_for(int fd, short events, int& remaining_ms) noexcept;

// Waits (bounded by L5PG_UPGRADE_TIMEOUT_MS) for l5pgd's one-byte answer to an upgrade
// request. 0 with errno set on timeout, EOF or error.
[[nodiscard]] char await_answer(int fd) noexcept;

}  // namespace l5pg::shim
