#include "transport/rdma/channel/link.hpp"

#include <unistd.h>
#include <algorithm>
#include <cstring>
#include <new>

#include "transport/wait/doorbell.hpp"

namespace l5pg::rdma {
namespace {

constexpr uint64_t kSeqMask = (uint64_t{1} << 56) - 1;
// A write() posts up to two record WRITEs, a READ and a mailbox byte between waits.
constexpr uint32_t kMinSendQueue = 16;
// Doorbell bytes drained per on_socket_readable(): a peer writing them in a loop must not
// keep the caller (an l5pgd worker serving other sessions too) draining for ever. What is
// left keeps the socket readable for the next round.
constexpr size_t kDoorbellDrainBudget = 4096;

}  // namespace

bool Link::init(Device& device, const QpOptions& qp_options, size_t local_ring, int session_fd,
                std::chrono::milliseconds timeout, std::string& error) {
    timeout_ = timeout;
    session_fd_.store(session_fd, std::memory_order_relaxed);
    auto give_up = [&] {
        if (qp_ == nullptr && qp_options.soft_wire_fd >= 0)
            ::close(qp_options.soft_wire_fd);  // QpOptions: the wire is always taken over
        return false;
    };
    if (!valid_ring_size(local_ring)) {
        error = "ring size must be a power of two between 4 KiB and 256 MiB";
        return give_up();
    }
    pd_ = device.alloc_pd(error);
    if (pd_ == nullptr)
        return give_up();
    qp_ = pd_->create_qp(qp_options, error);
    if (qp_ == nullptr)
        return false;  // create_qp closed the wire
    auto area = Buffer::allocate(kControlSize + local_ring, error);
    if (!area)
        return false;
    area_ = std::move(*area);
    ::new (static_cast<void*>(area_.data())) AreaControl();
    area_mr_ =
        pd_->register_memory(area_.data(), kControlSize + local_ring,
                             Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead, error);
    if (area_mr_ == nullptr)
        return false;
    in_ = LocalRing(&control(), area_.data() + kControlSize, local_ring);
    depth_ = qp_->max_send_wr();
    if (depth_ < kMinSendQueue) {
        error = "send queue depth " + std::to_string(depth_) + " is below the minimum of " +
                std::to_string(kMinSendQueue);
        return false;
    }
    return true;
}

bool Link::attach(uint64_t remote_area, uint32_t remote_rkey, size_t remote_ring,
                  size_t max_payload, const QpEndpoint& remote, std::string& error) {
    if (!valid_ring_size(remote_ring)) {
        error = "peer's ring size must be a power of two between 4 KiB and 256 MiB";
        return false;
    }
    auto staging = Buffer::allocate(kScratchSize + remote_ring, error);
    if (!staging)
        return false;
    staging_ = std::move(*staging);
    staging_mr_ = pd_->register_memory(staging_.data(), kScratchSize + remote_ring,
                                       Access::LocalWrite, error);
    if (staging_mr_ == nullptr)
        return false;
    staging_.data()[kScratchOne] = std::byte{1};
    // A record must fit one work request as well as half the ring.
    size_t limit = max_record_payload(remote_ring);
    if (max_payload != 0)
        limit = std::min(limit, max_payload);
    limit = std::min<size_t>(limit, qp_->max_message_size() - kRecordHeaderSize - 1);
    out_ = RemoteRing(staging_.data() + kScratchSize, staging_mr_->lkey(),
                      remote_area + kControlSize, remote_rkey, remote_ring, limit);
    remote_area_ = remote_area;
    remote_rkey_ = remote_rkey;
    return qp_->connect(remote, error);
}

uint64_t Link::area_addr() const noexcept {
    return area_mr_->remote_addr(area_.data());
}

uint32_t Link::area_rkey() const noexcept {
    return area_mr_->rkey();
}

AreaControl& Link::control() const noexcept {
    return *std::launder(reinterpret_cast<AreaControl*>(area_.data()));
}

bool Link::can_post(uint32_t n) const noexcept {
    return posted_ - completed_ + n <= depth_;
}

bool Link::post(WrKind kind, WorkRequest wr, bool signaled, std::optional<uint64_t> completes_pos) {
    if (broken_ || qp_ == nullptr)
        return false;
    if (!can_post(1)) {
        fail("internal error: send queue overflow");
        return false;
    }
    // Selective signaling, but often enough that completions retire the send queue
    // slots of the unsignaled requests before it fills up.
    if (!signaled && since_signal_ + 1 >= std::max<uint32_t>(depth_ / 2, 1))
        signaled = true;
    const uint64_t seq = posted_ + 1;
    wr.wr_id = (static_cast<uint64_t>(kind) << 56) | seq;
    wr.signaled = signaled;
    std::string error;
    if (!qp_->post(wr, error)) {
        fail("posting an RDMA " + std::string(wr.opcode == Opcode::Read ? "READ" : "WRITE") +
             " failed: " + error);
        return false;
    }
    posted_ = seq;
    if (signaled) {
        if (!outstanding_signaled())
            waiting_since_ = std::chrono::steady_clock::now();
        last_signaled_ = seq;
        since_signal_ = 0;
        signaled_pos_.emplace_back(seq, completes_pos.value_or(out_.position()));
    } else {
        ++since_signal_;
    }
    return true;
}

bool Link::post_record(std::span<const std::byte> payload, bool publish) {
    std::array<WorkRequest, 2> wrs;
    const uint64_t before = out_.position();
    const size_t count = out_.stage(payload, wrs);
    const uint64_t after = out_.position();
    for (size_t i = 0; i < count; ++i) {
        const bool last = i + 1 == count;
        wrs[i].inline_data = wrs[i].length <= qp_->max_inline();
        if (!post(last && publish ? WrKind::Publish : WrKind::Data, wrs[i], last && publish,
                  last ? after : before))
            return false;
    }
    ++stats_.records_written;
    return true;
}

bool Link::post_one(WrKind kind, uint64_t remote_addr, uint32_t rkey, bool signaled) {
    WorkRequest wr;
    wr.opcode = Opcode::Write;
    wr.local = staging_.data() + kScratchOne;
    wr.lkey = staging_mr_->lkey();
    wr.length = 1;
    wr.remote_addr = remote_addr;
    wr.rkey = rkey;
    wr.inline_data = qp_ != nullptr && qp_->max_inline() >= 1;
    return post(kind, wr, signaled, std::nullopt);
}

bool Link::post_peer_flag(size_t offset, bool signaled) {
    return post_one(WrKind::Flag, remote_area_ + offset, remote_rkey_, signaled);
}

bool Link::post_write(std::byte* local, uint32_t lkey, uint32_t length, uint64_t remote_addr,
                      uint32_t rkey, bool signaled) {
    WorkRequest wr;
    wr.opcode = Opcode::Write;
    wr.local = local;
    wr.lkey = lkey;
    wr.length = length;
    wr.remote_addr = remote_addr;
    wr.rkey = rkey;
    return post(WrKind::Flag, wr, signaled, std::nullopt);
}

bool Link::post_read_pos() {
    if (read_in_flight_)
        return true;
    WorkRequest wr;
    wr.opcode = Opcode::Read;
    wr.local = staging_.data() + kScratchReadPos;
    wr.lkey = staging_mr_->lkey();
    wr.length = sizeof(uint64_t);
    wr.remote_addr = remote_area_ + kReadPosOffset;
    wr.rkey = remote_rkey_;
    if (!post(WrKind::ReadPos, wr, true, std::nullopt))
        return false;
    read_in_flight_ = true;
    return true;
}

void Link::on_completion(const Completion& c) {
    if (c.status != WcStatus::Success) {
        std::string why;
        if (qp_ != nullptr)
            (void)qp_->failed(&why);
        fail(std::string("RDMA ") + (c.opcode == Opcode::Read ? "READ" : "WRITE") +
             " failed: " + to_string(c.status) + (why.empty() ? "" : " (" + why + ")"));
        return;
    }
    const uint64_t seq = c.wr_id & kSeqMask;
    // A signaled completion retires every earlier request of the QP as well.
    completed_ = std::max(completed_, seq);
    waiting_since_ = std::chrono::steady_clock::now();
    while (!signaled_pos_.empty() && signaled_pos_.front().first <= completed_) {
        out_.note_completed(signaled_pos_.front().second);
        signaled_pos_.pop_front();
    }
    switch (static_cast<WrKind>(c.wr_id >> 56)) {
        case WrKind::ReadPos: {
            read_in_flight_ = false;
            uint64_t pos;
            std::memcpy(&pos, staging_.data() + kScratchReadPos, sizeof pos);
            if (!out_.update_read_pos(pos))
                fail("the peer reported an impossible read position " + std::to_string(pos) +
                     " (we wrote up to " + std::to_string(out_.position()) + ")");
            break;
        }
        case WrKind::Publish:
            wake_peer_reader();
            break;
        default:
            break;
    }
}

bool Link::progress() {
    if (qp_ == nullptr) {
        fail("queue pair destroyed");
        return false;
    }
    std::array<Completion, 16> batch;
    for (;;) {
        const size_t n = qp_->poll(batch);
        for (size_t i = 0; i < n; ++i)
            on_completion(batch[i]);
        if (n < batch.size())
            break;
    }
    std::string why;
    if (!broken_ && qp_->failed(&why))
        fail("queue pair failed: " + why);
    // The devices' own timeouts normally fire first; this bounds a peer that keeps its
    // transport alive but never answers.
    if (!broken_ && outstanding_signaled() &&
        std::chrono::steady_clock::now() - waiting_since_ > timeout_)
        fail("no RDMA completion within " + std::to_string(timeout_.count()) + " ms");
    return !broken_;
}

bool Link::await(uint64_t seq) {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + timeout_;
    while (completed_ < seq) {
        if (!progress())
            return false;
        if (completed_ >= seq)
            break;
        const auto left = deadline - Clock::now();
        if (left <= Clock::duration::zero()) {
            fail("no RDMA completion within " + std::to_string(timeout_.count()) + " ms");
            return false;
        }
        (void)qp_->wait(std::min<Clock::duration>(left, std::chrono::milliseconds(100)));
    }
    return !broken_;
}

size_t Link::read(std::span<std::byte> out, RecordState& state) {
    const uint64_t before = in_.records();
    const size_t n = in_.read(out, state);
    if (state == RecordState::InFlight)
        ++stats_.in_flight_seen;
    if (in_.records() != before) {
        stats_.records_read += in_.records() - before;
        // Dekker with the peer's "WRITE tx flag, then READ our position" (link.hpp).
        std::atomic_thread_fence(std::memory_order_seq_cst);
        std::atomic<uint8_t>& flag = control().peer_tx_waiting;
        if (flag.load(std::memory_order_relaxed) != 0 &&
            flag.exchange(0, std::memory_order_acq_rel) != 0)
            ring_doorbell();
    }
    if (state == RecordState::Corrupt)
        fail(std::string("corrupt record from the peer: ") + in_.corrupt_reason());
    return n;
}

IoResult Link::read_some(std::span<std::byte> out, RecordState& state) {
    if (out.empty())
        return {0, IoStatus::Ok};
    const size_t n = read(out, state);
    if (n > 0)
        return {n, IoStatus::Ok};
    if (state == RecordState::Corrupt)
        return {0, IoStatus::Error};
    const IoStatus s = failure_status();
    return {0, s == IoStatus::Ok ? IoStatus::WouldBlock : s};
}

void Link::wake_peer_reader() noexcept {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    std::atomic<uint8_t>& flag = control().peer_rx_waiting;
    if (flag.load(std::memory_order_relaxed) != 0 &&
        flag.exchange(0, std::memory_order_acq_rel) != 0)
        ring_doorbell();
}

void Link::ring_doorbell() noexcept {
    if (!wait::ring_doorbell(session_fd()))
        peer_closed_ = true;
    else
        ++stats_.doorbells_sent;
}

void Link::on_socket_readable() noexcept {
    size_t count = 0;
    const wait::DrainResult r = wait::drain_doorbells(session_fd(), count, kDoorbellDrainBudget);
    stats_.doorbells_received += count;
    if (r != wait::DrainResult::Drained)
        peer_closed_ = true;
}

IoStatus Link::failure_status() noexcept {
    if (broken_ && !peer_closed_)
        on_socket_readable();
    if (peer_closed_)
        return IoStatus::Closed;
    return broken_ ? IoStatus::Error : IoStatus::Ok;
}

void Link::fail(std::string reason) {
    if (broken_)
        return;
    broken_ = true;
    reason_ = std::move(reason);
}

}  // namespace l5pg::rdma
