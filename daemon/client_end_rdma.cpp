#include "daemon/client_end_rdma.hpp"

#include <fmt/format.h>

#include "daemon/worker.hpp"

namespace l5pg::daemon {

RdmaClientEnd::RdmaClientEnd(std::unique_ptr<rdma::ServerSession> channel, Capacity::Share memory,
                             bool soft, ClientEndHost& host, Worker& worker, uint64_t session_id)
    : QueuedClientEnd(host),
      memory_(std::move(memory)),
      channel_(std::move(channel)),
      soft_(soft),
      worker_(worker),
      session_id_(session_id) {}

void RdmaClientEnd::report(IoStatus status) {
    const bool closed = status == IoStatus::Closed;
    host_.client_departed(closed ? std::string("client disconnected")
                                 : fmt::format("RDMA channel error: {}", channel_->error()),
                          !closed);
}

void RdmaClientEnd::on_socket_readable() {
    if (!channel_)
        return;
    channel_->on_socket_readable();
    // EOF stays readable for ever: stop watching; read() reports Closed once everything
    // the client sent has been read, from the polling loop.
    if (channel_->peer_closed())
        host_.watch_client_readable(false);
}

// Completions: doorbells owed, READ results; errors show in the next read or write.
void RdmaClientEnd::progress(bool) {
    if (channel_)
        (void)channel_->progress();
}

namespace {
// How long the soft device's wire may stay quiet and open after the client's socket closed
// before its input counts as done. An honest client closes its wire right after its socket
// (the shim shuts the socket down first, then flushes and closes the wire: the queue pair
// then fails, and everything it sent has landed), and a wire still delivering bytes (a large
// last record, TCP retransmissions) restarts the wait; one that keeps a copy of the wire
// open would otherwise keep the session waiting for WRITEs that never come, and the worker
// polling it without a pause, until limits.drain_timeout_ms.
constexpr auto kSoftWireGrace = std::chrono::seconds(2);
}  // namespace

void RdmaClientEnd::fill_input() {
    if (channel_ && !exhausted_) {
        // Whether every WRITE the client made has landed, taken before the read: the soft
        // device applies the last ones from its wire until the client's end of it closes
        // (then the queue pair fails); a hardware QP has applied them before the client's
        // socket could show EOF.
        const bool settled = channel_->broken() || !soft_;
        std::span<std::byte> space = in_.prepare(kChunk);
        const rdma::IoResult r = channel_->read(space);
        in_.commit(r.bytes);
        if (r.bytes == 0 && (r.status == IoStatus::Closed || r.status == IoStatus::Error)) {
            exhausted_ = settled || soft_wire_quiet();
            report(r.status);
        }
    }
}

bool RdmaClientEnd::soft_wire_quiet() {
    const auto now = std::chrono::steady_clock::now();
    const uint64_t received = channel_->bytes_received();
    if (!quiet_since_ || received != received_then_) {  // first look, or the wire delivered
        quiet_since_ = now;
        received_then_ = received;
    }
    return now - *quiet_since_ >= kSoftWireGrace;
}

// Its lingering flush delivers it. With the client's ring nearly full only a part may go
// (the channel has no all-or-nothing write yet): the client then sees its connection end
// mid-message, as it would without the FATAL.
void RdmaClientEnd::send_if_room(std::span<const std::byte> message) {
    if (channel_)
        (void)channel_->write(message);
}

void RdmaClientEnd::flush() {
    if (host_.client_gone() || !channel_)
        out_.clear();
    while (!out_.empty()) {
        const auto data = out_.front();
        const rdma::IoResult r = channel_->write(data);
        out_.consume(r.bytes);
        if (r.status == IoStatus::Closed || r.status == IoStatus::Error) {
            report(r.status);
            return;
        }
        if (r.status == IoStatus::WouldBlock || r.bytes < data.size())
            break;  // the client's ring is full: the polling loop retries when it drains
    }
}

bool RdmaClientEnd::resume_output() {
    if (out_.empty() || !channel_ || (channel_->write_blocked() && !channel_->writable()))
        return false;
    const size_t before = out_.size();
    flush();
    return out_.size() != before;
}

void RdmaClientEnd::on_client_gone(bool) {
    out_.clear();  // undeliverable now
}

// Nothing more can come from it: free the channel (a peer-closed channel would keep the
// worker from ever blocking). The session leaves the polling loop.
void RdmaClientEnd::on_input_done() {
    channel_.reset();
    memory_.release();
}

// Let the client find every byte we wrote: when the session is reaped, the worker keeps the
// channel, and the socket it rings, until then (bounded by the completion timeout) without
// blocking. Otherwise the queue pair goes at reaping: the client can no longer reach us.
void RdmaClientEnd::on_close(bool error, bool client_gone) {
    linger_ = channel_ && !error && !client_gone && !channel_->broken() && !channel_->peer_closed();
}

void RdmaClientEnd::reap(UniqueFd& socket) {
    if (linger_)
        worker_.linger(session_id_, std::move(channel_), std::move(socket), std::move(memory_));
}

}  // namespace l5pg::daemon
