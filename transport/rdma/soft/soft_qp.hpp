// One soft queue pair: the initiator side (post, poll, wait) runs on the application's
// threads; the target side (applying the peer's WRITEs, answering its READs) and the
// reception of responses run on the device's thread (WireEngine), which serves the
// wires of all the device's queue pairs.
//
// Nothing on the device thread blocks on send: everything outgoing goes through one byte
// queue per queue pair that is flushed whenever its socket is writable, so two QPs that
// flood each other cannot deadlock. A peer that stops reading our responses while asking
// for more fails the QP instead of growing the queue without bound.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "transport/rdma/device.hpp"
#include "transport/rdma/soft/frame.hpp"
#include "transport/rdma/soft/region_table.hpp"
#include "transport/rdma/soft/soft_device.hpp"
#include "transport/rdma/soft/wire_engine.hpp"
#include "transport/rdma/sys.hpp"

namespace l5pg::rdma::soft {

// The deepest send queue a soft QP has (QpOptions::max_send_wr is clamped to it).
inline constexpr uint32_t kMaxSendQueueDepth = 4096;

class SoftQueuePair final : public QueuePair, private WireHandler {
  public:
    [[nodiscard]] static std::unique_ptr<SoftQueuePair> create(std::shared_ptr<RegionTable> table,
                                                               const SoftConfig& config,
                                                               const QpOptions& options,
                                                               std::string& error);
    ~SoftQueuePair() override;

    QpEndpoint local_endpoint() const noexcept override;
    bool connect(const QpEndpoint& remote, std::string& error) override;
    bool post(const WorkRequest& wr, std::string& error) override;
    void hold_posts(bool hold) noexcept override;
    size_t poll(std::span<Completion> out) override;
    bool wait(std::chrono::nanoseconds timeout) override;
    bool failed(std::string* reason) const override;
    uint32_t max_inline() const noexcept override { return config_.max_inline; }
    uint32_t max_send_wr() const noexcept override { return max_send_wr_; }
    uint32_t max_message_size() const noexcept override { return config_.max_message; }
    uint64_t bytes_received() const noexcept override {
        return bytes_received_.load(std::memory_order_relaxed);
    }

    // Private, for make_unique.
    SoftQueuePair(std::shared_ptr<RegionTable> table, const SoftConfig& config, sys::UniqueFd wire,
                  uint32_t max_send_wr) noexcept;

  private:
    using Clock = std::chrono::steady_clock;

    struct Pending {
        uint64_t seq;
        uint64_t wr_id;
        Opcode opcode;
        bool signaled;
        std::byte* local;
        uint32_t lkey;
        uint32_t length;
    };
    enum class State { Init, Ready, Error };

    // ---- device thread (WireHandler)
    [[nodiscard]] bool on_wire_event(uint32_t events) noexcept override;
    void settle() noexcept override;
    // Reads what the socket has and dispatches complete frames; true when the turn's
    // budget ran out before the socket was empty.
    [[nodiscard]] bool receive();
    [[nodiscard]] bool dispatch_complete_frames();
    [[nodiscard]] bool check_frame_header(const std::byte* p, FrameHeader& h);
    void dispatch(const FrameHeader& h, const std::byte* payload);
    [[nodiscard]] bool admit_write_header(const FrameHeader& h);  // false: the QP failed
    [[nodiscard]] bool take_request_seq(const FrameHeader& h);    // false: the QP failed
    // Runs fn(destination) when the WRITE's target range may be written; the status.
    template <class Fn>
    [[nodiscard]] WcStatus write_target(const FrameHeader& h, Fn&& fn) {
        if (h.length == 0)
            return WcStatus::RemoteInvalidRequest;
        return table_->with_range(h.rkey, h.remote_addr, h.length, Access::RemoteWrite,
                                  std::forward<Fn>(fn));
    }
    void refuse_write(const FrameHeader& h, WcStatus status);  // a NAK, then the QP fails
    void on_write_request(const FrameHeader& h, const std::byte* payload);
    void on_read_request(const FrameHeader& h);
    void on_ack(const FrameHeader& h);
    void on_read_response(const FrameHeader& h, const std::byte* payload);
    void on_nak(const FrameHeader& h);
    void apply_write(std::byte* dst, const std::byte* src, size_t n) noexcept;

    // ---- shared, mutex_ held
    void append_frame_locked(const FrameHeader& h, const std::byte* payload, size_t n);
    [[nodiscard]] int flush_locked();  // non-blocking send of the queue; errno on failure
    void retire_locked(uint64_t seq);  // requests up to `seq` executed successfully
    // Error state: every pending request completes (the first with `first_status`, the
    // rest Flushed), the socket is shut down so the peer fails too.
    void fail_locked(std::string reason, WcStatus first_status = WcStatus::Flushed);
    void protocol_error(std::string reason);
    void start_held() noexcept;  // sends what post() held back
    // After appending a response: fails the QP if the peer does not read them.
    void note_response_locked();
    [[nodiscard]] bool wait_driving(std::chrono::nanoseconds timeout);

    const std::shared_ptr<RegionTable> table_;
    const SoftConfig config_;
    const sys::UniqueFd wire_;
    uint64_t engine_token_ = 0;  // the wire's registration with config_.engine, once connected
    const uint32_t max_send_wr_;
    const uint32_t qpn_;
    const uint32_t psn_;

    mutable std::mutex mutex_;
    std::condition_variable cv_;
    State state_ = State::Init;
    bool held_ = false;  // hold_posts(true): post() appends to out_ without sending
    std::string error_;
    std::deque<Pending> pending_;  // posted, not yet retired; in seq order
    std::deque<Completion> completions_;
    std::vector<std::byte> out_;  // outgoing frames; out_[out_head_..] not yet sent
    size_t out_head_ = 0;
    uint64_t sent_total_ = 0;  // bytes of out_ sent so far, over the QP's life
    // Where each response (Ack, Nak, READ response) queued but not yet sent ends, counted
    // like sent_total_: an honest peer cannot have more requests awaiting one than its
    // send queue holds, so more than kMaxSendQueueDepth means it does not read its wire.
    std::deque<uint64_t> unsent_response_ends_;
    uint64_t next_seq_;
    int send_error_ = 0;               // errno of a failed send, not yet acted upon
    uint32_t awaiting_ = 0;            // pending requests that will get a response
    Clock::time_point last_response_;  // for the ack timeout

    // ---- device thread only
    std::vector<std::byte> in_;  // received bytes; in_[in_head_, in_len_) not yet parsed
    size_t in_head_ = 0;
    size_t in_len_ = 0;
    std::atomic<uint64_t> bytes_received_{0};  // read from the wire, for bytes_received()
    uint64_t expected_peer_seq_ = 0;
    uint64_t rng_;
};

}  // namespace l5pg::rdma::soft
