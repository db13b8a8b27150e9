#include "transport/rdma/soft/soft_qp.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <random>

#include "transport/rdma/atomic_bytes.hpp"
#include "transport/wait/deadline.hpp"

namespace l5pg::rdma::soft {
namespace {

constexpr size_t kMinReceiveBuffer = 64 * 1024;
// Bytes one queue pair reads per turn of the device thread before the other wires.
constexpr size_t kReceiveBudget = 256 * 1024;
// A receive buffer grown beyond this for a large frame is released once the frame is done.
constexpr size_t kKeptReceiveBuffer = 1024 * 1024;

[[nodiscard]] uint32_t random_u24() {
    return static_cast<uint32_t>(std::random_device{}()) & 0xffffffu;
}

[[nodiscard]] std::string describe(const FrameHeader& h) {
    return "seq " + std::to_string(h.seq) + ", rkey " + std::to_string(h.rkey) + ", addr " +
           std::to_string(h.remote_addr) + ", length " + std::to_string(h.length);
}

}  // namespace

std::unique_ptr<SoftQueuePair> SoftQueuePair::create(std::shared_ptr<RegionTable> table,
                                                     const SoftConfig& config,
                                                     const QpOptions& options, std::string& error) {
    if (options.soft_wire_fd < 0) {
        error = "soft device: QpOptions::soft_wire_fd must be a connected stream socket";
        return nullptr;
    }
    sys::UniqueFd wire(options.soft_wire_fd);
    int type = 0;
    socklen_t len = sizeof type;
    if (::getsockopt(wire.get(), SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) {
        error = "soft device: the wire fd is not a stream socket";
        return nullptr;
    }
    if (!sys::set_nonblocking(wire.get())) {
        error = sys::errno_text("soft device: fcntl(O_NONBLOCK) on the wire", errno);
        return nullptr;
    }
    // Small frames (acks, flags, mailbox bytes) must not wait for Nagle. Fails harmlessly
    // on AF_UNIX sockets.
    const int one = 1;
    (void)::setsockopt(wire.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    const uint32_t depth = std::clamp<uint32_t>(options.max_send_wr, 1, kMaxSendQueueDepth);
    return std::make_unique<SoftQueuePair>(std::move(table), config, std::move(wire), depth);
}

SoftQueuePair::SoftQueuePair(std::shared_ptr<RegionTable> table, const SoftConfig& config,
                             sys::UniqueFd wire, uint32_t max_send_wr) noexcept
    : table_(std::move(table)),
      config_(config),
      wire_(std::move(wire)),
      max_send_wr_(max_send_wr),
      qpn_(random_u24()),
      psn_(random_u24()),
      next_seq_(psn_),
      rng_(0x9e3779b97f4a7c15ull ^ (uint64_t{qpn_} << 24 | psn_)) {}

SoftQueuePair::~SoftQueuePair() {
    if (engine_token_ != 0)
        config_.engine->remove(wire_.get(), engine_token_);
}

QpEndpoint SoftQueuePair::local_endpoint() const noexcept {
    QpEndpoint e;
    e.kind = DeviceKind::Soft;
    e.qpn = qpn_;
    e.psn = psn_;
    return e;
}

bool SoftQueuePair::connect(const QpEndpoint& remote, std::string& error) {
    if (remote.kind != DeviceKind::Soft) {
        error = std::string("peer uses the ") + to_string(remote.kind) +
                " RDMA device, this end the soft device";
        return false;
    }
    {
        std::lock_guard lock(mutex_);
        if (state_ != State::Init) {
            error = "queue pair already connected";
            return false;
        }
        // Requests are numbered from the sender's PSN: a frame from anyone but the peer
        // whose endpoint we were given is out of sequence and fails the QP.
        expected_peer_seq_ = remote.psn;
        state_ = State::Ready;
        last_response_ = Clock::now();
    }
    engine_token_ = config_.engine->add(wire_.get(), *this, error);
    if (engine_token_ == 0) {
        std::lock_guard lock(mutex_);
        fail_locked(error);
        return false;
    }
    return true;
}

bool SoftQueuePair::post(const WorkRequest& wr, std::string& error) {
    if (wr.opcode != Opcode::Write && wr.opcode != Opcode::Read) {
        error = "unknown opcode";
        return false;
    }
    if (wr.length == 0 || wr.length > config_.max_message) {
        error = "work request length must be 1.." + std::to_string(config_.max_message);
        return false;
    }
    if (wr.inline_data && (wr.opcode != Opcode::Write || wr.length > config_.max_inline)) {
        error = "inline data only for WRITEs of at most " + std::to_string(config_.max_inline) +
                " bytes";
        return false;
    }
    const bool write = wr.opcode == Opcode::Write;
    bool posted = false;
    bool send_failed = false;
    const WcStatus local_ok = table_->with_range(
        wr.lkey, reinterpret_cast<uint64_t>(wr.local), wr.length,
        write ? Access::None : Access::LocalWrite, [&](std::byte* local) {
            std::lock_guard lock(mutex_);
            if (state_ != State::Ready) {
                error = state_ == State::Init ? "queue pair not connected"
                                              : "queue pair failed: " + error_;
                return;
            }
            if (pending_.size() >= max_send_wr_) {
                error = "send queue full";
                return;
            }
            FrameHeader h;
            h.type = write ? FrameType::WriteRequest : FrameType::ReadRequest;
            h.flags = write && wr.signaled ? kFlagAckRequested : 0;
            h.length = wr.length;
            h.seq = next_seq_++;
            h.remote_addr = wr.remote_addr;
            h.rkey = wr.rkey;
            // The source of a WRITE is copied right here: every soft WRITE is "inline".
            append_frame_locked(h, write ? local : nullptr, write ? wr.length : 0);
            pending_.push_back(
                Pending{h.seq, wr.wr_id, wr.opcode, wr.signaled, wr.local, wr.lkey, wr.length});
            // The ack timeout runs from here. The device thread is not woken for it: it
            // checks every queue pair's timeout periodically (WireEngine's scan) and on
            // every event of its wire. Waking it per request cost a context switch per
            // signaled WRITE (issue 17).
            if ((wr.signaled || !write) && awaiting_++ == 0)
                last_response_ = Clock::now();
            // What does not fit into the socket now is sent by the device thread on the
            // EPOLLOUT edge that follows the short send.
            if (const int err = held_ ? 0 : flush_locked(); err != 0)
                send_error_ = err;  // the device thread fails the QP, after reading what came
            send_failed = send_error_ != 0;
            posted = true;
        });
    if (local_ok != WcStatus::Success) {
        error = "local buffer is not inside a region of this protection domain (lkey " +
                std::to_string(wr.lkey) + ")";
        return false;
    }
    if (send_failed)
        config_.engine->kick();
    return posted;
}

void SoftQueuePair::hold_posts(bool hold) noexcept {
    {
        std::lock_guard lock(mutex_);
        held_ = hold;
    }
    if (!hold)
        start_held();
}

void SoftQueuePair::start_held() noexcept {
    {
        std::lock_guard lock(mutex_);
        if (state_ != State::Ready || send_error_ != 0 || out_head_ == out_.size())
            return;
        send_error_ = flush_locked();
        if (send_error_ == 0)
            return;
    }
    config_.engine->kick();  // the device thread fails the QP, after reading what came
}

size_t SoftQueuePair::poll(std::span<Completion> out) {
    std::lock_guard lock(mutex_);
    size_t n = 0;
    while (n < out.size() && !completions_.empty()) {
        out[n++] = completions_.front();
        completions_.pop_front();
    }
    return n;
}

bool SoftQueuePair::wait(std::chrono::nanoseconds timeout) {
    // The hold ends here, not only the first socketful: what does not fit now must go on
    // the EPOLLOUT edges that follow, or we would wait for a request never sent.
    hold_posts(false);
    if (config_.engine->driven())
        return wait_driving(timeout);
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, timeout,
                        [this] { return !completions_.empty() || state_ == State::Error; });
}

// No device thread: run the device ourselves until our completion arrives.
bool SoftQueuePair::wait_driving(std::chrono::nanoseconds timeout) {
    const auto deadline = wait::Deadline::after(timeout);
    for (;;) {
        {
            std::lock_guard lock(mutex_);
            if (!completions_.empty() || state_ == State::Error)
                return true;
        }
        const int ms = deadline.poll_ms();
        if (ms == 0)
            return false;
        config_.engine->drive(std::min(ms, 60'000));
    }
}

bool SoftQueuePair::failed(std::string* reason) const {
    std::lock_guard lock(mutex_);
    if (state_ != State::Error)
        return false;
    if (reason != nullptr)
        *reason = error_;
    return true;
}

// ---------------------------------------------------------------- device thread

bool SoftQueuePair::on_wire_event(uint32_t events) noexcept {
    bool more = false;
    if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0)
        more = receive();
    settle();
    return more;
}

// Flushes what post() could not send, fails the QP on a failed send or when a request
// went unanswered for the ack timeout.
void SoftQueuePair::settle() noexcept {
    int send_error;
    {
        std::lock_guard lock(mutex_);
        if (state_ != State::Ready)
            return;
        if (send_error_ == 0 && !held_)
            send_error_ = flush_locked();
        send_error = send_error_;
        if (send_error == 0) {
            if (awaiting_ > 0 && Clock::now() - last_response_ >= config_.ack_timeout)
                fail_locked("no response from the peer within " +
                                std::to_string(config_.ack_timeout.count()) +
                                " ms (soft device ack timeout)",
                            WcStatus::RetryExceeded);
            return;
        }
    }
    // Read what the peer sent before it went away: a NAK there explains the failure
    // better than EPIPE.
    (void)receive();
    std::lock_guard lock(mutex_);
    fail_locked(sys::errno_text("send on the soft RDMA wire", send_error));
}

bool SoftQueuePair::receive() {
    {
        std::lock_guard lock(mutex_);
        if (state_ != State::Ready)
            return false;  // a failed QP executes nothing more
    }
    for (size_t received = 0; received < kReceiveBudget;) {
        if (in_head_ > 0) {  // keep only the unparsed tail, at the front
            std::memmove(in_.data(), in_.data() + in_head_, in_len_ - in_head_);
            in_len_ -= in_head_;
            in_head_ = 0;
        }
        if (in_len_ == 0 && in_.size() > kKeptReceiveBuffer)
            std::vector<std::byte>().swap(in_);  // a large frame is done: give its room back
        // Room for the frame being assembled: its header tells how long it is (bounded by
        // max_message, checked first), but the room grows with what arrives, a read budget
        // at a time: a header alone must not make us commit a whole message's memory.
        size_t want = std::max(kMinReceiveBuffer, in_len_ + 1);
        if (in_len_ >= kFrameHeaderSize) {
            FrameHeader h;
            if (!check_frame_header(in_.data(), h) || !admit_write_header(h))
                return false;
            want = std::max(
                want, std::min(kFrameHeaderSize + payload_length(h), in_len_ + kReceiveBudget));
        }
        if (in_.size() < want)
            in_.resize(want);
        const ssize_t n =
            sys::recv_raw(wire_.get(), in_.data() + in_len_, in_.size() - in_len_, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return false;
        if (n <= 0) {
            std::lock_guard lock(mutex_);
            fail_locked(n == 0 ? "the peer closed the soft RDMA connection"
                               : sys::errno_text("recv on the soft RDMA wire", errno));
            return false;
        }
        in_len_ += static_cast<size_t>(n);
        received += static_cast<size_t>(n);
        bytes_received_.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
        if (!dispatch_complete_frames())
            return false;
    }
    return true;  // other wires get their turn; the engine calls us again
}

// Executes every complete frame in in_; false once the QP failed.
bool SoftQueuePair::dispatch_complete_frames() {
    while (in_len_ - in_head_ >= kFrameHeaderSize) {
        FrameHeader h;
        if (!check_frame_header(in_.data() + in_head_, h))
            return false;
        const size_t total = kFrameHeaderSize + payload_length(h);
        if (in_len_ - in_head_ < total)
            break;
        dispatch(h, in_.data() + in_head_ + kFrameHeaderSize);
        in_head_ += total;
        std::lock_guard lock(mutex_);
        if (state_ != State::Ready)
            return false;
    }
    return true;
}

// Decodes a header and bounds its length; a bad one fails the QP.
bool SoftQueuePair::check_frame_header(const std::byte* p, FrameHeader& h) {
    std::string error;
    if (!decode_frame_header(p, h, error)) {
        protocol_error(error);
        return false;
    }
    if (h.length > config_.max_message) {
        protocol_error("soft RDMA frame longer than the maximum message size (" + describe(h) +
                       ")");
        return false;
    }
    return true;
}

void SoftQueuePair::dispatch(const FrameHeader& h, const std::byte* payload) {
    switch (h.type) {
        case FrameType::WriteRequest:
            return on_write_request(h, payload);
        case FrameType::ReadRequest:
            return on_read_request(h);
        case FrameType::Ack:
            return on_ack(h);
        case FrameType::ReadResponse:
            return on_read_response(h, payload);
        case FrameType::Nak:
            return on_nak(h);
    }
}

// ---- target side

// A WRITE whose frame is still arriving: its target is checked from the header, before its
// payload is set aside. One the target cannot take would otherwise make this process hold
// up to max_message for it until the payload is complete (a client of l5pgd's, before it
// has even logged in); one it can take is no larger than a region the target registered.
bool SoftQueuePair::admit_write_header(const FrameHeader& h) {
    if (h.type != FrameType::WriteRequest)
        return true;
    const WcStatus status = write_target(h, [](std::byte*) {});
    if (status == WcStatus::Success)
        return true;
    if (take_request_seq(h))
        refuse_write(h, status);
    return false;
}

bool SoftQueuePair::take_request_seq(const FrameHeader& h) {
    if (h.seq != expected_peer_seq_) {
        protocol_error("soft RDMA request out of sequence (" + describe(h) + ")");
        return false;
    }
    ++expected_peer_seq_;
    return true;
}

void SoftQueuePair::refuse_write(const FrameHeader& h, WcStatus status) {
    std::lock_guard lock(mutex_);
    FrameHeader nak{FrameType::Nak, 0, 0, h.seq, 0, 0, static_cast<uint32_t>(status)};
    append_frame_locked(nak, nullptr, 0);
    fail_locked(std::string("rejected the peer's WRITE: ") + to_string(status) + " (" +
                describe(h) + ")");
}

void SoftQueuePair::on_write_request(const FrameHeader& h, const std::byte* payload) {
    if (!take_request_seq(h))
        return;
    const WcStatus status =
        write_target(h, [&](std::byte* dst) { apply_write(dst, payload, h.length); });
    if (status != WcStatus::Success)
        return refuse_write(h, status);
    std::lock_guard lock(mutex_);
    if ((h.flags & kFlagAckRequested) != 0) {
        FrameHeader ack{FrameType::Ack, 0, 0, h.seq, 0, 0, 0};
        append_frame_locked(ack, nullptr, 0);
        note_response_locked();
    }
}

void SoftQueuePair::on_read_request(const FrameHeader& h) {
    if (!take_request_seq(h))
        return;
    {
        std::lock_guard lock(mutex_);
        // An honest peer reads its responses; one that only asks would grow the queue.
        if (out_.size() - out_head_ > size_t{2} * config_.max_message + (1u << 20))
            return fail_locked("the peer does not read its READ responses");
    }
    WcStatus status = WcStatus::RemoteInvalidRequest;
    if (h.length > 0) {
        status = table_->with_range(
            h.rkey, h.remote_addr, h.length, Access::RemoteRead, [&](std::byte* src) {
                std::lock_guard lock(mutex_);
                FrameHeader resp{FrameType::ReadResponse, 0, h.length, h.seq, 0, 0, 0};
                const size_t at = out_.size();
                append_frame_locked(resp, nullptr, 0);
                out_.resize(at + kFrameHeaderSize + h.length);
                // Dekker partner of the owner's "store position, fence, read flag": an
                // earlier WRITE of this QP (a wait flag) is ordered before these loads.
                std::atomic_thread_fence(std::memory_order_seq_cst);
                load_relaxed(out_.data() + at + kFrameHeaderSize, src, h.length);
                note_response_locked();
            });
    }
    if (status != WcStatus::Success) {
        std::lock_guard lock(mutex_);
        FrameHeader nak{FrameType::Nak, 0, 0, h.seq, 0, 0, static_cast<uint32_t>(status)};
        append_frame_locked(nak, nullptr, 0);
        fail_locked(std::string("rejected the peer's READ: ") + to_string(status) + " (" +
                    describe(h) + ")");
    }
}

// Every byte but the last with relaxed stores, then the last with release: a reader
// that acquires the last byte sees the whole WRITE. In scramble mode the other bytes go
// in a pseudo-random order with yields in between, so a concurrent reader really sees
// partial states (tests of the channel's torn-write detection).
void SoftQueuePair::apply_write(std::byte* dst, const std::byte* src, size_t n) noexcept {
    const size_t body = n - 1;
    if (!config_.scramble_writes) {
        store_relaxed(dst, src, body);
    } else if (body > 0) {
        auto next = [this] {
            rng_ ^= rng_ << 13;
            rng_ ^= rng_ >> 7;
            rng_ ^= rng_ << 17;
            return rng_;
        };
        // k -> (a*k + b) mod body is a permutation when gcd(a, body) == 1.
        uint64_t a = (next() % body) | 1;
        while (std::gcd(a, uint64_t{body}) != 1)
            a += 2;
        const uint64_t b = next() % body;
        const size_t yield_every = body < 4096 ? 8 : 4096;
        for (size_t k = 0; k < body; ++k) {
            const size_t i = static_cast<size_t>((a * k + b) % body);
            store_u8(dst + i, static_cast<uint8_t>(src[i]), std::memory_order_relaxed);
            if (k % yield_every == yield_every - 1)
                ::sched_yield();
        }
    }
    store_u8(dst + body, static_cast<uint8_t>(src[body]), std::memory_order_release);
    // RC responder order: whatever this QP executes next (a READ of the owner's position)
    // must not be reordered before this WRITE became visible.
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

// ---- initiator side: responses

void SoftQueuePair::on_ack(const FrameHeader& h) {
    std::lock_guard lock(mutex_);
    if (pending_.empty() || h.seq < pending_.front().seq || h.seq >= next_seq_)
        return fail_locked("soft RDMA protocol violation: ack for an unknown request (" +
                           describe(h) + ")");
    const Pending& acked = pending_[h.seq - pending_.front().seq];  // seqs are contiguous
    if (acked.opcode != Opcode::Write || !acked.signaled)
        return fail_locked("soft RDMA protocol violation: ack for a request that wanted none");
    last_response_ = Clock::now();
    retire_locked(h.seq);
}

void SoftQueuePair::on_read_response(const FrameHeader& h, const std::byte* payload) {
    Pending read{};
    {
        std::lock_guard lock(mutex_);
        if (pending_.empty() || h.seq < pending_.front().seq || h.seq >= next_seq_)
            return fail_locked(
                "soft RDMA protocol violation: READ response for an unknown "
                "request (" +
                describe(h) + ")");
        read = pending_[h.seq - pending_.front().seq];
        if (read.opcode != Opcode::Read || read.length != h.length)
            return fail_locked(
                "soft RDMA protocol violation: READ response does not match "
                "its request (" +
                describe(h) + ")");
    }
    // Only this thread retires requests, so `read` stays pending while we copy.
    const WcStatus status = table_->with_range(
        read.lkey, reinterpret_cast<uint64_t>(read.local), read.length, Access::LocalWrite,
        [&](std::byte* dst) { store_relaxed(dst, payload, read.length); });
    std::lock_guard lock(mutex_);
    if (state_ != State::Ready)
        return;
    last_response_ = Clock::now();
    if (status == WcStatus::Success)
        return retire_locked(h.seq);
    retire_locked(h.seq - 1);
    completions_.push_back(Completion{read.wr_id, WcStatus::LocalProtectionError, read.opcode, 0});
    pending_.pop_front();
    --awaiting_;
    fail_locked("READ destination was deregistered while the READ was outstanding");
}

void SoftQueuePair::on_nak(const FrameHeader& h) {
    std::lock_guard lock(mutex_);
    if (pending_.empty() || h.seq < pending_.front().seq || h.seq >= next_seq_)
        return fail_locked("soft RDMA protocol violation: NAK for an unknown request (" +
                           describe(h) + ")");
    retire_locked(h.seq - 1);  // everything before the failed request was executed
    const Pending failed = pending_.front();
    pending_.pop_front();
    if (failed.signaled || failed.opcode == Opcode::Read)
        --awaiting_;
    WcStatus status = static_cast<WcStatus>(h.status);
    if (h.status == 0 || h.status > static_cast<uint32_t>(WcStatus::TransportError))
        status = WcStatus::TransportError;
    completions_.push_back(Completion{failed.wr_id, status, failed.opcode, 0});
    fail_locked(std::string("the peer rejected our request: ") + to_string(status));
}

// ---------------------------------------------------------------- shared helpers

void SoftQueuePair::note_response_locked() {
    unsent_response_ends_.push_back(sent_total_ + (out_.size() - out_head_));
    if (unsent_response_ends_.size() > kMaxSendQueueDepth)
        fail_locked("the peer does not read its wire (" +
                    std::to_string(unsent_response_ends_.size()) + " responses unsent)");
}

void SoftQueuePair::append_frame_locked(const FrameHeader& h, const std::byte* payload, size_t n) {
    const size_t at = out_.size();
    out_.resize(at + kFrameHeaderSize + n);
    encode_frame_header(h, out_.data() + at);
    if (n > 0)
        std::memcpy(out_.data() + at + kFrameHeaderSize, payload, n);
}

int SoftQueuePair::flush_locked() {
    while (out_head_ < out_.size()) {
        const ssize_t n = sys::send_raw(wire_.get(), out_.data() + out_head_,
                                        out_.size() - out_head_, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            out_head_ += static_cast<size_t>(n);
            sent_total_ += static_cast<uint64_t>(n);
            while (!unsent_response_ends_.empty() && unsent_response_ends_.front() <= sent_total_)
                unsent_response_ends_.pop_front();
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        return n < 0 ? errno : EPIPE;
    }
    if (out_head_ == out_.size()) {
        if (out_.capacity() > (size_t{4} << 20))
            out_ = {};  // do not keep a huge buffer after one big transfer
        out_.clear();
        out_head_ = 0;
    } else if (out_head_ >= (size_t{1} << 20)) {
        out_.erase(out_.begin(), out_.begin() + static_cast<ptrdiff_t>(out_head_));
        out_head_ = 0;
    }
    return 0;
}

// Requests complete in order: an Ack or READ response for `seq` also retires every
// earlier request. Only signaled ones produce a completion (selective signaling).
void SoftQueuePair::retire_locked(uint64_t seq) {
    bool any = false;
    while (!pending_.empty() && pending_.front().seq <= seq) {
        const Pending& p = pending_.front();
        if (p.signaled) {
            completions_.push_back(Completion{p.wr_id, WcStatus::Success, p.opcode, p.length});
            any = true;
        }
        if (p.signaled || p.opcode == Opcode::Read)
            --awaiting_;
        pending_.pop_front();
    }
    if (any)
        cv_.notify_all();
}

void SoftQueuePair::fail_locked(std::string reason, WcStatus first_status) {
    if (state_ == State::Error)
        return;
    state_ = State::Error;
    error_ = std::move(reason);
    // Like a verbs QP entering the error state: every outstanding request completes, in
    // order, with an error status (signaled or not).
    for (const Pending& p : pending_) {
        completions_.push_back(Completion{p.wr_id, first_status, p.opcode, 0});
        first_status = WcStatus::Flushed;
    }
    pending_.clear();
    awaiting_ = 0;
    (void)flush_locked();  // best effort: a NAK explains the failure to the peer
    ::shutdown(wire_.get(), SHUT_RDWR);
    cv_.notify_all();
    if (config_.failures != nullptr)
        config_.failures->notify();
}

void SoftQueuePair::protocol_error(std::string reason) {
    std::lock_guard lock(mutex_);
    fail_locked(std::move(reason));
}

}  // namespace l5pg::rdma::soft
