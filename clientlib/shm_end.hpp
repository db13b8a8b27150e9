// The shim's end of a shared-memory connection (transport/channel_end.hpp): the segment
// the shim created and handed to l5pgd, our writer of the client->server ring and reader
// of the server->client ring, and the doorbell protocol on the session socket.
#pragma once

#include <atomic>

#include "transport/channel_end.hpp"
#include "transport/shm/ring.hpp"
#include "transport/shm/segment.hpp"

namespace l5pg::shim {

class ShmEnd final : public transport::ChannelEnd {
  public:
    explicit ShmEnd(shm::Segment segment);

    [[nodiscard]] transport::IoResult write(int fd, std::span<const std::byte> bytes) override;
    [[nodiscard]] transport::IoResult read(int fd, std::span<std::byte> out) override;
    [[nodiscard]] bool can_peek() const override { return true; }
    [[nodiscard]] transport::IoResult peek(std::span<std::byte> out, size_t skip) override;
    [[nodiscard]] size_t unread_bytes() override;
    [[nodiscard]] bool ready(transport::Want want) override;
    [[nodiscard]] bool arm(transport::Want want, uint64_t wait_id) override;
    void disarm(transport::Want want) override;
    void on_socket_readable(int fd) override;
    void prepare_for_foreign_wait(int fd, bool room_awaited) override;
    [[nodiscard]] bool hung_up() override;
    [[nodiscard]] bool broken() const override { return error_ != nullptr; }
    [[nodiscard]] const char* error() const override { return error_; }
    [[nodiscard]] wait::WaitPolicy wait_policy(wait::AdaptiveSpin& spin,
                                               const wait::WaitPolicy& configured,
                                               bool only_session) override;
    void close_by_application() override;
    void forget_after_fork() override;

  private:
    [[nodiscard]] bool server_closed();
    [[nodiscard]] bool closed() { return peer_closed_ || server_closed(); }
    void mark_broken(const char* what);
    // What read() and peek() report for an empty ring.
    [[nodiscard]] transport::IoResult nothing_to_read();
    // One doorbell byte; false when it failed, which means the peer is gone.
    bool ring(int fd);

    shm::Segment segment_;
    shm::RingWriter tx_;           // client -> server
    shm::RingReader rx_;           // server -> client
    bool peer_closed_ = false;     // EOF seen on the socket
    const char* error_ = nullptr;  // l5pgd wrote something impossible into a ring
    void drain_owed_doorbells(int fd, bool room_awaited);
    // A doorbell byte was requested and not yet drained (threads of the application may
    // both wait on the connection).
    std::atomic<bool> poke_outstanding_{false};
    // reader_waiting armed by prepare_for_foreign_wait(), writer_waiting by arm(): once
    // l5pgd takes the flag, it rings (drain_owed_doorbells()).
    std::atomic<bool> armed_for_data_{false};
    std::atomic<bool> armed_for_room_{false};
};

// In a forked child: forget which of l5pgd's waits the parent's threads rang.
void shm_forget_rung_waits_after_fork();

}  // namespace l5pg::shim
