// What both ends of an RDMA channel have in common: a protection domain of their own, an
// area (control block + incoming ring) registered for the peer, a staging region for
// the outgoing ring, the queue pair, send-queue accounting with selective signaling,
// completion handling, and the doorbell on the session socket.
//
// Waking a peer that sleeps in poll() on the session socket (the SHM channel's Dekker
// pattern, carried over RDMA):
//   waiter:    WRITE 1 into a flag in the other side's control block, wait for that
//              WRITE's completion, re-check its condition, then block on the socket;
//   publisher: after its data WRITE has *completed* (or after it consumed, for space),
//              seq_cst fence, exchange its local flag to 0; if it was 1, one doorbell byte.
// A completion means the WRITE is visible at the target, so either the publisher's
// exchange sees the flag or the waiter's re-check sees the data. The soft device keeps
// the same order for READs (a READ after a flag WRITE on the same QP is fenced).
//
// Not thread-safe: one Link is used by one thread at a time.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "transport/rdma/buffer.hpp"
#include "transport/rdma/channel/io.hpp"
#include "transport/rdma/channel/layout.hpp"
#include "transport/rdma/channel/local_ring.hpp"
#include "transport/rdma/channel/remote_ring.hpp"
#include "transport/rdma/device.hpp"

namespace l5pg::rdma {

struct ChannelStats {
    uint64_t records_written = 0;
    uint64_t records_read = 0;
    uint64_t in_flight_seen = 0;  // reads that found a record still being written (torn)
    uint64_t doorbells_sent = 0;
    uint64_t doorbells_received = 0;  // bytes drained from the session socket
};

// Kinds of work requests, kept in the top byte of wr_id.
enum class WrKind : uint8_t {
    Data = 1,     // record bytes
    Publish = 2,  // the WRITE after which the peer can see new data (signaled)
    ReadPos = 3,  // READ of the peer's read position (signaled)
    Flag = 4,     // a wait flag or mailbox byte without publishing data
};

class Link {
  public:
    Link() = default;
    Link(const Link&) = delete;
    Link& operator=(const Link&) = delete;

    // Phase 1: protection domain, our area with its `local_ring` bytes of ring, the QP.
    [[nodiscard]] bool init(Device& device, const QpOptions& qp_options, size_t local_ring,
                            int session_fd, std::chrono::milliseconds timeout, std::string& error);
    // Phase 2: the peer's area; staging for it; connects the QP.
    [[nodiscard]] bool attach(uint64_t remote_area, uint32_t remote_rkey, size_t remote_ring,
                              size_t max_payload, const QpEndpoint& remote, std::string& error);

    [[nodiscard]] ProtectionDomain& pd() const noexcept { return *pd_; }
    [[nodiscard]] QpEndpoint endpoint() const noexcept { return qp_->local_endpoint(); }
    [[nodiscard]] uint64_t area_addr() const noexcept;
    [[nodiscard]] uint32_t area_rkey() const noexcept;
    [[nodiscard]] size_t local_ring_size() const noexcept { return in_.size(); }
    [[nodiscard]] AreaControl& control() const noexcept;
    [[nodiscard]] int session_fd() const noexcept {
        return session_fd_.load(std::memory_order_relaxed);
    }
    // The descriptor the caller now names the session's socket by (the shim's program may
    // have moved it with dup2() and closed the first): doorbells go through it from now on.
    void use_session_fd(int fd) noexcept { session_fd_.store(fd, std::memory_order_relaxed); }

    // ---- outgoing
    [[nodiscard]] size_t payload_that_fits() const noexcept { return out_.payload_that_fits(); }
    [[nodiscard]] size_t payload_that_fits_after(size_t n) const noexcept {
        return out_.payload_that_fits_after(n);
    }
    [[nodiscard]] const RemoteRing& out() const noexcept { return out_; }
    // Room in the send queue for `n` more work requests.
    [[nodiscard]] bool can_post(uint32_t n) const noexcept;
    // Requests posted while a Batch lives are started together when it ends (or when the
    // Link waits for a completion): one system call instead of one per request on the
    // soft device (QueuePair::hold_posts).
    class Batch {
      public:
        explicit Batch(Link& link) noexcept : link_(link) { link_.hold_posts(true); }
        ~Batch() { link_.hold_posts(false); }
        Batch(const Batch&) = delete;
        Batch& operator=(const Batch&) = delete;

      private:
        Link& link_;
    };
    // Posts one record. `publish`: its last WRITE is signaled as a Publish.
    [[nodiscard]] bool post_record(std::span<const std::byte> payload, bool publish);
    // One-byte WRITE of the constant 1 (flags, mailbox), inline.
    [[nodiscard]] bool post_one(WrKind kind, uint64_t remote_addr, uint32_t rkey, bool signaled);
    // WRITE of 1 into a flag of the peer's control block (offset from layout.hpp).
    [[nodiscard]] bool post_peer_flag(size_t offset, bool signaled);
    // A plain WRITE from any region of our protection domain (tests, tools).
    [[nodiscard]] bool post_write(std::byte* local, uint32_t lkey, uint32_t length,
                                  uint64_t remote_addr, uint32_t rkey, bool signaled);
    [[nodiscard]] uint64_t remote_area() const noexcept { return remote_area_; }
    [[nodiscard]] uint32_t remote_rkey() const noexcept { return remote_rkey_; }
    // READ of the peer's read position (signaled); no-op while one is outstanding.
    [[nodiscard]] bool post_read_pos();
    [[nodiscard]] bool read_in_flight() const noexcept { return read_in_flight_; }
    [[nodiscard]] uint64_t last_posted() const noexcept { return posted_; }
    [[nodiscard]] uint64_t last_signaled() const noexcept { return last_signaled_; }
    [[nodiscard]] bool outstanding_signaled() const noexcept { return completed_ < last_signaled_; }
    // Blocks (bounded by the timeout) until work request `seq` (signaled) completed.
    [[nodiscard]] bool await(uint64_t seq);
    // Blocks until the queue pair has a completion to poll, at most `max` (no polling).
    void wait_for_completion(std::chrono::nanoseconds max) { (void)qp_->wait(max); }
    // Handles every completion available now. Returns false once broken, which includes
    // a signaled request outstanding for longer than the timeout.
    bool progress();

    // ---- incoming
    [[nodiscard]] RecordState check() noexcept { return in_.check(); }
    [[nodiscard]] size_t unread_bytes() noexcept { return in_.unread_bytes(); }
    [[nodiscard]] uint64_t read_position() const noexcept { return in_.position(); }
    // Reads from our ring; wakes a peer waiting for space when a record was consumed;
    // fails the link on a corrupt record.
    [[nodiscard]] size_t read(std::span<std::byte> out, RecordState& state);
    // read() as a byte-stream result. Records that landed before a failure or the end of
    // the session are still delivered; then Error for a corrupt record, the failure
    // status once the link is broken or closed, else WouldBlock (`state` says whether a
    // record is in flight).
    [[nodiscard]] IoResult read_some(std::span<std::byte> out, RecordState& state);

    // ---- session socket
    void ring_doorbell() noexcept;
    // The session socket is readable: discard doorbell bytes, notice EOF.
    void on_socket_readable() noexcept;

    // ---- state
    void fail(std::string reason);
    [[nodiscard]] bool broken() const noexcept { return broken_; }
    [[nodiscard]] const std::string& reason() const noexcept { return reason_; }
    [[nodiscard]] bool peer_closed() const noexcept { return peer_closed_; }
    // What the queue pair has taken in from the peer so far (QueuePair::bytes_received).
    [[nodiscard]] uint64_t bytes_received() const noexcept {
        return qp_ != nullptr ? qp_->bytes_received() : 0;
    }
    // Ok while usable; Closed when the peer ended the session (socket EOF), Error when
    // the link is broken for another reason. A broken QP usually means the peer went
    // away, so the socket is checked for EOF first.
    [[nodiscard]] IoStatus failure_status() noexcept;
    [[nodiscard]] const ChannelStats& stats() const noexcept { return stats_; }
    [[nodiscard]] ChannelStats& stats() noexcept { return stats_; }

    // Destroys the queue pair (and with it the peer's access); the rest stays readable.
    void shutdown() noexcept { qp_.reset(); }

  private:
    void hold_posts(bool hold) noexcept {
        if (qp_ != nullptr)
            qp_->hold_posts(hold);
    }
    [[nodiscard]] bool post(WrKind kind, WorkRequest wr, bool signaled,
                            std::optional<uint64_t> completes_pos);
    void on_completion(const Completion& c);
    void wake_peer_reader() noexcept;

    std::chrono::milliseconds timeout_{10000};
    std::atomic<int> session_fd_{-1};  // any of the program's threads may name it anew

    // Declaration order = reverse destruction order: the QP goes first, then the
    // regions, then the memory behind them.
    std::unique_ptr<ProtectionDomain> pd_;
    Buffer area_;     // AreaControl + incoming ring
    Buffer staging_;  // scratch + mirror of the peer's ring
    std::unique_ptr<MemoryRegion> area_mr_;
    std::unique_ptr<MemoryRegion> staging_mr_;
    std::unique_ptr<QueuePair> qp_;

    LocalRing in_;
    RemoteRing out_;
    uint64_t remote_area_ = 0;
    uint32_t remote_rkey_ = 0;

    uint32_t depth_ = 0;          // send queue depth
    uint64_t posted_ = 0;         // sequence number of the last posted WR
    uint64_t completed_ = 0;      // every WR up to here has completed
    uint64_t last_signaled_ = 0;  // sequence number of the last signaled WR
    uint32_t since_signal_ = 0;   // unsignaled WRs since the last signaled one
    bool read_in_flight_ = false;
    std::chrono::steady_clock::time_point waiting_since_;     // last completion, or first post
    std::deque<std::pair<uint64_t, uint64_t>> signaled_pos_;  // (seq, write position)

    bool broken_ = false;
    bool peer_closed_ = false;
    std::string reason_;
    ChannelStats stats_;
};

}  // namespace l5pg::rdma
