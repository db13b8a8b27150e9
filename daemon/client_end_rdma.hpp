// A client upgraded to RDMA (client_end.hpp) over rdma::ServerSession
// (transport/rdma/channel/server.hpp): what the client wrote into our ring is read into a
// staging queue for peek(); what goes to it is queued and written into its ring as it
// makes room. The session socket carries doorbell bytes and EOF only.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "daemon/capacity.hpp"
#include "daemon/client_end_queued.hpp"
#include "transport/rdma/channel/server.hpp"

namespace l5pg::daemon {

class Worker;

class RdmaClientEnd final : public QueuedClientEnd {
  public:
    // `soft`: the soft device, whose last WRITEs land only until the client's end of its
    // wire closes (see peek()).
    // `memory`: the channel's rings' share of rdma.max_memory, given back with the channel
    // (which may outlive the session: Worker::linger()).
    RdmaClientEnd(std::unique_ptr<rdma::ServerSession> channel, Capacity::Share memory, bool soft,
                  ClientEndHost& host, Worker& worker, uint64_t session_id);

    [[nodiscard]] bool polled() const noexcept override { return true; }
    void on_socket_readable() override;
    void on_socket_writable() override {}
    void progress(bool) override;
    void want_input(bool) override {}
    [[nodiscard]] bool input_exhausted() override { return exhausted_ && in_.empty(); }
    void send_if_room(std::span<const std::byte> message) override;
    void flush() override;
    [[nodiscard]] bool resume_output() override;
    // The endpoint arms and checks every RDMA session itself (ServerEndpoint::
    // prepare_to_block(), from Worker::arm_sessions()); it only needs to know whether input
    // is wanted.
    [[nodiscard]] bool arm_before_block(bool input_wanted, uint64_t) override {
        if (channel_)
            channel_->pause_input(!input_wanted);
        return false;
    }
    void disarm_after_block() override {}
    [[nodiscard]] bool shares_sole_cpu(uint32_t) noexcept override { return false; }
    void on_client_gone(bool) override;
    void on_input_done() override;
    void on_close(bool error, bool client_gone) override;
    void reap(UniqueFd& socket) override;

  private:
    void fill_input() override;
    // Closed: the client's socket is at EOF. Error: the queue pair failed -- also what a
    // client tearing its channel down looks like for a moment (the session looks at the
    // socket again before counting it as an error).
    void report(IoStatus status);
    // Whether the client's wire has been quiet for kSoftWireGrace since its socket closed
    // (nothing taken in from it meanwhile).
    [[nodiscard]] bool soft_wire_quiet();

    Capacity::Share memory_;  // the rings' share of rdma.max_memory: goes with channel_
    std::unique_ptr<rdma::ServerSession> channel_;  // null once input is done after departure
    const bool soft_;
    Worker& worker_;
    const uint64_t session_id_;
    bool exhausted_ = false;  // read() has nothing more and never will
    bool linger_ = false;     // at reaping, hand the channel to the worker to flush
    // Since when read() has found the socket closed and the wire delivering nothing (soft
    // device), and what the wire had delivered then.
    std::optional<std::chrono::steady_clock::time_point> quiet_since_;
    uint64_t received_then_ = 0;
};

}  // namespace l5pg::daemon
