// The byte stream of a socket client: the socket itself, or TLS over it once l5pgd has
// accepted the client's SSLRequest. recv() and send() behave like the system calls
// (n > 0; 0 at EOF; -1 with errno, EAGAIN when the socket must become ready first), so
// the session's reading and forwarding code is one for both.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "daemon/tls_context.hpp"
#include "transport/wait/passed_fds.hpp"

namespace l5pg::daemon {

class ClientStream {
  public:
    explicit ClientStream(int fd = -1) noexcept : fd_(fd) {}

    void start_tls(SslPtr ssl) noexcept { ssl_ = std::move(ssl); }
    [[nodiscard]] bool tls() const noexcept { return ssl_ != nullptr; }

    enum class Handshake { Done, Pending, Failed };
    // Drives the TLS handshake; on Failed, `error` says why.
    [[nodiscard]] Handshake handshake(std::string& error);
    [[nodiscard]] bool handshake_done() const noexcept { return handshake_done_; }

    // A Unix socket's peer may attach descriptors to its bytes: they come in `passed` (empty
    // before the call) rather than being closed in this thread (transport/wait/passed_fds.hpp).
    ssize_t recv(void* buf, size_t len, wait::PassedFds& passed) noexcept;
    ssize_t send(const void* buf, size_t len) noexcept;
    // Decrypted bytes TLS holds that recv() returns without the socket being readable.
    [[nodiscard]] size_t pending() const noexcept;
    // The last TLS call that returned EAGAIN needs the socket writable, not readable.
    [[nodiscard]] bool wants_write() const noexcept { return wants_write_; }

    // Back to the bare socket without close_notify, once an RDMA upgrade negotiated inside
    // TLS is accepted (the client drops TLS at the same point; from then on the socket
    // carries only doorbells and EOF). False, and TLS kept, if the client sent anything
    // after its last handshake message: a protocol error.
    [[nodiscard]] bool end_tls() noexcept;

    // Best effort close_notify before the socket closes (TLS only; never blocks).
    void say_goodbye() noexcept;

  private:
    ssize_t tls_result(int ret) noexcept;

    int fd_;
    SslPtr ssl_;
    bool handshake_done_ = false;
    bool wants_write_ = false;
};

}  // namespace l5pg::daemon
