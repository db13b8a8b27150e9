// systemd's service notification protocol (sd_notify(3)), written out: one datagram of
// "KEY=VALUE\n" lines to the AF_UNIX socket named by $NOTIFY_SOCKET ('@' = the abstract
// namespace), and the watchdog interval from $WATCHDOG_USEC (for us if $WATCHDOG_PID is
// unset or ours).
//
// Why not libsystemd's sd_notify(): the protocol is documented as stable and meant to be
// reimplemented (systemd's "Interface Portability and Stability" promise covers it); it is
// one sendmsg() here, while libsystemd would be a build dependency (libsystemd-dev) and a
// run-time one for every l5pgd, including the container image and hosts without systemd,
// for no behaviour we need.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/unique_fd.hpp"

namespace l5pg::daemon {

class SystemdNotifier {
  public:
    // Reads $NOTIFY_SOCKET, $WATCHDOG_USEC and $WATCHDOG_PID. Without $NOTIFY_SOCKET (not
    // started by systemd as Type=notify) every send() is a no-op.
    static SystemdNotifier from_environment();

    [[nodiscard]] bool enabled() const noexcept { return fd_.valid(); }
    // Sends `state` ("READY=1", "STATUS=...", several lines joined with '\n'). Failures are
    // logged once and otherwise ignored: the service manager's problem is not ours to die of.
    // `routine`: a periodic STATUS= or WATCHDOG=1, dropped rather than block the main loop
    // when systemd's queue is full (the next comes soon); the others wait for room.
    // True when sent (or not enabled).
    bool send(std::string_view state, bool routine = false);
    // How often systemd wants WATCHDOG=1, when it wants it at all.
    [[nodiscard]] std::optional<std::chrono::microseconds> watchdog_interval() const noexcept {
        return watchdog_;
    }

  private:
    UniqueFd fd_;
    sockaddr_un address_{};
    socklen_t address_length_ = 0;
    std::optional<std::chrono::microseconds> watchdog_;
    bool failure_logged_ = false;
};

// CLOCK_MONOTONIC in microseconds, as MONOTONIC_USEC= beside RELOADING=1 wants it.
[[nodiscard]] uint64_t monotonic_usec() noexcept;

}  // namespace l5pg::daemon
