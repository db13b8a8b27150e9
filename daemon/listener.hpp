// Listening sockets of l5pgd: a Unix socket <dir>/.s.PGSQL.<port> (with the marker file
// the shim uses to recognise l5pgd) and a TCP socket.
#pragma once

#include <sys/time.h>

#include <cstdint>
#include <string>

#include "daemon/unique_fd.hpp"

namespace l5pg::daemon {

// After an accept() failure a listener stops listening this long: out of descriptors,
// accept() fails at once for as long as a connection waits, and libevent would retry it
// every loop turn.
inline constexpr timeval kAcceptPause{0, 100 * 1000};

// A bound, listening, non-blocking Unix socket plus its marker file; both are removed
// on destruction. Throws std::runtime_error with a clear message on failure (directory
// missing, another server already listening, ...).
class UnixListener {
  public:
    UnixListener(const std::string& dir, uint16_t port, int backlog, uint32_t mode);
    ~UnixListener();
    UnixListener(const UnixListener&) = delete;
    UnixListener& operator=(const UnixListener&) = delete;

    [[nodiscard]] int fd() const noexcept { return fd_.get(); }
    [[nodiscard]] const std::string& path() const noexcept { return path_; }

    // "<socket path>.l5pg": one line "l5pgd 1 <socket inode> <pid>". The shim upgrades
    // connections only to a socket whose inode matches, so a stale marker next to a
    // real Postgres socket never makes it send an upgrade request to Postgres.
    [[nodiscard]] static std::string marker_path(const std::string& socket_path);

  private:
    UniqueFd fd_;
    std::string path_;
};

class TcpListener {
  public:
    TcpListener(const std::string& address, uint16_t port, int backlog);
    [[nodiscard]] int fd() const noexcept { return fd_.get(); }
    [[nodiscard]] const std::string& description() const noexcept { return description_; }

  private:
    UniqueFd fd_;
    std::string description_;
};

}  // namespace l5pg::daemon
