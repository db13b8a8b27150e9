// Pieces both upgrade handshakes (upgrade.cpp: SHM, upgrade_rdma.cpp: RDMA) share.
#pragma once

#include <cerrno>
#include <chrono>
#include <cstddef>

#include "clientlib/debug_log.hpp"
#include "clientlib/upgrade.hpp"
#include "transport/wait/deadline.hpp"

namespace l5pg::shim {

// Only a connection that starts with a startup packet is upgraded; cancel requests never
// are (PQcancel runs in signal handlers and must stay a plain socket). Logs why not.
[[nodiscard]] bool first_packet_may_upgrade(int fd, const std::byte* first, size_t len);

// Whether the application made the socket non-blocking (the channel keeps that up).
[[nodiscard]] bool socket_nonblocking(int fd);

// One deadline for a whole upgrade, L5PG_UPGRADE_TIMEOUT_MS from its start: every wait of
// every step draws on it (an RDMA upgrade has a dozen, each of which took the whole budget
// before). Started by the upgrading thread for the duration of its try_upgrade*(); a
// fallback to plain TCP after the attempt failed (begin_fallback()) gets one more budget,
// so that a slow attempt does not also cost the application its connection.
class UpgradeClock {
  public:
    UpgradeClock();
    ~UpgradeClock();
    UpgradeClock(const UpgradeClock&) = delete;
    UpgradeClock& operator=(const UpgradeClock&) = delete;

    // The rest of the running upgrade (an abandoned attempt's goodbye, a fresh connection)
    // has L5PG_UPGRADE_TIMEOUT_MS from now; once per upgrade.
    static void begin_fallback();

  private:
    // The thread's clock before this one (a signal handler's upgrade inside another's),
    // restored at the end. A clock left behind by a siglongjmp() out of an upgrade is
    // replaced by the next one.
    int64_t outer_deadline_ns_;
    bool outer_fallback_;
};

// The running upgrade's deadline, or L5PG_UPGRADE_TIMEOUT_MS from now outside one.
[[nodiscard]] wait::Deadline upgrade_deadline();

// Waits (bounded by L5PG_UPGRADE_TIMEOUT_MS) for a non-blocking connect() in progress on
// fd to finish; false with errno set (ETIMEDOUT, or the connect's error).
[[nodiscard]] bool await_connected(int fd);

// Waits (bounded by L5PG_UPGRADE_TIMEOUT_MS) for l5pgd's one-byte answer to an upgrade
// request. 0 with errno set on timeout, EOF or error.
[[nodiscard]] char await_answer(int fd);

// Logs "fd N<parts...>" (L5PG_DEBUG) and leaves errno as it was before logging.
template <class... Parts>
void log_fd(int fd, const Parts*... parts) {
    const int saved = errno;
    DebugLine line = debug_log();
    line.str("fd ").inum(fd);
    (line.str(parts), ...);
    line.end();
    errno = saved;
}

// The connection stays as it is: logs why, restores the errno the application's call
// must see and returns Plain.
template <class... Parts>
[[nodiscard]] UpgradeResult stay_plain(int fd, int saved_errno, const Parts*... parts) {
    log_fd(fd, parts...);
    errno = saved_errno;
    return UpgradeResult::Plain;
}

// The handshake failed: logs why and returns Failed with the failure's errno.
template <class... Parts>
[[nodiscard]] UpgradeResult upgrade_failed(int fd, const Parts*... parts) {
    log_fd(fd, parts...);
    return UpgradeResult::Failed;
}

// l5pgd accepted but the channel pool is full (kMaxChannels upgraded connections).
[[nodiscard]] inline UpgradeResult no_free_channel(int fd) {
    errno = EMFILE;
    return upgrade_failed(fd, ": too many upgraded connections");
}

}  // namespace l5pg::shim
