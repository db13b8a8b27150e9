// A client on a plain socket (client_end.hpp): Unix or TCP, through TLS once started
// (ClientStream). What it sent is read into a staging queue one chunk at a time, and only
// after its socket announced data (no recv() that would only say EAGAIN); what goes to it
// is queued up to limits.session_buffer_bytes and sent as the socket takes it.
#pragma once

#include "daemon/client_end_queued.hpp"
#include "daemon/client_stream.hpp"

namespace l5pg::daemon {

class SocketClientEnd final : public QueuedClientEnd {
  public:
    SocketClientEnd(ClientStream& stream, ClientEndHost& host) noexcept;

    [[nodiscard]] bool polled() const noexcept override { return false; }
    void on_socket_readable() override { readable_ = true; }
    void on_socket_writable() override { write_blocked_ = false; }
    void progress(bool) override {}
    void want_input(bool on) override;
    [[nodiscard]] bool input_exhausted() override { return eof_ && in_.empty(); }
    void send_if_room(std::span<const std::byte> message) override;
    void flush() override;
    [[nodiscard]] bool resume_output() override { return false; }
    [[nodiscard]] bool arm_before_block(bool, uint64_t) override { return false; }
    void disarm_after_block() override {}
    [[nodiscard]] bool shares_sole_cpu(uint32_t) noexcept override { return false; }
    void on_client_gone(bool may_still_read) override;
    void on_input_done() override {}
    void on_close(bool, bool) override {}
    void reap(UniqueFd&) override {}

  private:
    void fill_input() override;

    ClientStream& stream_;   // the session's
    bool readable_ = false;  // the socket announced data (or TLS holds some) since the last read
    bool write_blocked_ = false;  // send() said EAGAIN and the socket has not been writable since
    bool eof_ = false;            // recv() reported EOF or an error: nothing more comes
};

}  // namespace l5pg::daemon
