// The shim's end of an RDMA connection (transport/channel_end.hpp) on top of
// rdma::ClientChannel, which does the RDMA (transport/rdma/channel/client.hpp).
//
// Not done yet for RDMA (see docs/wire-format.md section 5): the SHM end's "poke", which
// keeps the socket readable while received data sits unread, for applications that wait
// in their own epoll (psycopg 3, asyncio). They would get the wait flag armed before each
// return (prepare_for_foreign_wait(): the next response rings the doorbell) but no
// doorbell for data that landed meanwhile, and could hang; so try_upgrade_rdma() leaves
// connections of a process that uses epoll on TCP. poll()/select() users (libpq, psql,
// pgbench, psycopg2) are not affected.
#pragma once

#include <memory>

#include "transport/channel_end.hpp"
#include "transport/rdma/channel/client.hpp"

namespace l5pg::shim {

class RdmaEnd final : public transport::ChannelEnd {
  public:
    explicit RdmaEnd(std::unique_ptr<rdma::ClientChannel> channel);

    [[nodiscard]] transport::IoResult write(int fd, std::span<const std::byte> bytes) override;
    [[nodiscard]] transport::IoResult read(int fd, std::span<std::byte> out) override;
    // The channel consumes what it reads: MSG_PEEK is refused (EOPNOTSUPP).
    [[nodiscard]] bool can_peek() const override { return false; }
    [[nodiscard]] transport::IoResult peek(std::span<std::byte>, size_t) override {
        return {0, transport::IoStatus::Error};
    }
    // The rest of the record at the read position, once all of it has landed: the records
    // behind it may still be in flight (a later one may land before an earlier one).
    [[nodiscard]] size_t unread_bytes() override { return channel_->unread_bytes(); }
    [[nodiscard]] bool ready(transport::Want want) override;
    // RDMA's flag carries no wait name: l5pgd rings for every armed session.
    [[nodiscard]] bool arm(transport::Want want, uint64_t wait_id) override;
    // Nothing to undo: a flag the server finds set costs one spurious doorbell.
    void disarm(transport::Want) override {}
    void on_socket_readable(int fd) override;
    void prepare_for_foreign_wait(int fd, bool room_awaited) override;
    [[nodiscard]] bool hung_up() override { return channel_->peer_closed(); }
    [[nodiscard]] bool broken() const override {
        return channel_->broken() && !channel_->peer_closed();
    }
    [[nodiscard]] const char* error() const override { return channel_->error().c_str(); }
    [[nodiscard]] wait::WaitPolicy wait_policy(wait::AdaptiveSpin& spin,
                                               const wait::WaitPolicy& configured,
                                               bool only_session) override;
    // The queue pair goes with the end (joins a soft device thread, closes its wire).
    void close_by_application() override {}
    void forget_after_fork() override;

  private:
    // Leaked on purpose in a forked child (forget_after_fork()): its copy has no soft-device
    // thread to join and must not touch the parent's verbs resources.
    std::unique_ptr<rdma::ClientChannel> channel_;
};

}  // namespace l5pg::shim
