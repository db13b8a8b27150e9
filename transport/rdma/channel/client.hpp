// Client end of an L5 RDMA channel (the shim's side).
//
// Client -> server: each record is RDMA-written into the client's ring in the server's
// memory, then one byte into the client's slot of the server's mailbox array; RC order
// lands the record first (L5 Fig. 9). write() waits for the mailbox WRITE's completion
// (one round trip) before it returns: only then may it check whether the server went to
// sleep and needs a doorbell, and an application blocked in its own epoll would
// otherwise never get its answer.
// Server -> client: the server writes [len][~len][payload][OK] into our ring; read() is
// purely local.
//
// Readiness for poll(): the session socket carries doorbell bytes. Before blocking on
// it for input, call arm_read(); if it returns true, poll the socket for POLLIN and
// call on_socket_readable() when it fires. arm_write()/POLLIN the same for ring space.
// wait_readable()/wait_writable() do all of that (spin, yield, arm, poll).
//
// Setup: create() -> send hello() to the server (e.g. in the upgrade request) -> get
// its Hello back -> connect(). The session socket stays owned by the caller.
//
// Not thread-safe; one thread at a time (the shim serialises calls per channel).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "transport/rdma/channel/hello.hpp"
#include "transport/rdma/channel/io.hpp"
#include "transport/rdma/channel/link.hpp"
#include "transport/rdma/device.hpp"
#include "transport/wait/policy.hpp"

namespace l5pg::rdma {

struct ClientOptions {
    size_t c2s_ring_size = kDefaultRingSize;  // asked for; the server may grant less
    size_t s2c_ring_size = kDefaultRingSize;  // our own incoming ring
    size_t max_record_payload = 0;  // 0: as large as the ring allows; smaller forces chunks
    // Upper bound on any wait for a completion; a dead peer fails the channel after this
    // at the latest (the device's own timeouts usually fire first).
    std::chrono::milliseconds completion_timeout{10000};
    wait::WaitPolicy budget;  // spin / yield before blocking in wait_*()
};

class ClientChannel {
  public:
    // Allocates and registers our area, creates the QP (in its own protection domain).
    [[nodiscard]] static std::unique_ptr<ClientChannel> create(Device& device, int session_fd,
                                                               const ClientOptions& options,
                                                               const QpOptions& qp_options,
                                                               std::string& error);
    [[nodiscard]] Hello hello() const;
    // Checks the server's hello and connects the QP; the channel is usable afterwards.
    [[nodiscard]] bool connect(const Hello& server, std::string& error);

    // Writes as much as fits (chunked into records), then publishes it. Ok with bytes
    // < size when the ring filled up; WouldBlock when nothing fit.
    [[nodiscard]] IoResult write(std::span<const std::byte> bytes);
    [[nodiscard]] IoResult read(std::span<std::byte> out);

    // True when read() would not return WouldBlock (data, EOF or error).
    [[nodiscard]] bool readable();
    // The unread bytes of the complete record at the read position (0: none there yet).
    [[nodiscard]] size_t unread_bytes() { return connected_ ? link_.unread_bytes() : 0; }
    // True when write() would not return WouldBlock with the position we know.
    [[nodiscard]] bool writable();
    // Before blocking on the socket for POLLIN. False: do not block (ready already).
    [[nodiscard]] bool arm_read();
    [[nodiscard]] bool arm_write();
    void on_socket_readable() noexcept { link_.on_socket_readable(); }
    // Blocking helpers; false on timeout.
    [[nodiscard]] bool wait_readable(std::chrono::milliseconds timeout);
    [[nodiscard]] bool wait_writable(std::chrono::milliseconds timeout);

    [[nodiscard]] bool broken() const noexcept { return link_.broken(); }
    [[nodiscard]] const std::string& error() const noexcept { return link_.reason(); }
    [[nodiscard]] bool peer_closed() const noexcept { return link_.peer_closed(); }
    [[nodiscard]] const ChannelStats& stats() const noexcept { return link_.stats(); }
    [[nodiscard]] int session_fd() const noexcept { return link_.session_fd(); }
    void use_session_fd(int fd) noexcept { link_.use_session_fd(fd); }

    // The server's hello (valid after connect()).
    [[nodiscard]] const Hello& server_hello() const noexcept { return server_; }

    // The hostile-client tests' raw WRITEs (tests/unit/rdma/hostile_test.cpp): defined
    // there, so the shim and l5pgd never carry them.
    friend struct HostileClient;

    ClientChannel() = default;  // use create()

  private:
    [[nodiscard]] bool flush(bool publish, bool refresh);
    [[nodiscard]] bool wait_until(bool for_write, std::chrono::milliseconds timeout);

    ClientOptions options_;
    Link link_;
    Hello server_;
    bool connected_ = false;
};

}  // namespace l5pg::rdma
