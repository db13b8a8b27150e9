#include "transport/rdma/channel/server.hpp"

#include <unistd.h>

#include <algorithm>

#include "transport/rdma/channel/exchange.hpp"

namespace l5pg::rdma {

// ---------------------------------------------------------------- endpoint

std::unique_ptr<ServerEndpoint> ServerEndpoint::create(Device& device, const ServerOptions& options,
                                                       std::string& error) {
    if (!valid_ring_size(options.max_ring_size)) {
        error = "max ring size must be a power of two between 4 KiB and 256 MiB";
        return nullptr;
    }
    auto mailboxes = MailboxArray::create(options.max_sessions, error);
    if (!mailboxes)
        return nullptr;
    return std::make_unique<ServerEndpoint>(device, options, std::move(*mailboxes));
}

ServerEndpoint::ServerEndpoint(Device& device, const ServerOptions& options, MailboxArray mailboxes)
    : device_(device),
      options_(options),
      mailboxes_(std::move(mailboxes)),
      by_slot_(mailboxes_.slots(), nullptr),
      scratch_(mailboxes_.slots()) {}

ServerEndpoint::~ServerEndpoint() = default;

std::unique_ptr<ServerSession> ServerEndpoint::accept(int session_fd, const Hello& client,
                                                      Hello& reply, const QpOptions& qp_options,
                                                      std::string& error) {
    auto refuse = [&](std::string why) -> std::unique_ptr<ServerSession> {
        if (qp_options.soft_wire_fd >= 0)
            ::close(qp_options.soft_wire_fd);  // QpOptions: the wire is always taken over
        error = std::move(why);
        return nullptr;
    };
    if (client.role != HelloRole::Client)
        return refuse("expected a client's RDMA hello");
    if (client.qp.kind != device_.kind())
        return refuse(std::string("the client uses the ") + to_string(client.qp.kind) +
                      " RDMA device, this server " + to_string(device_.kind()));
    const std::optional<uint32_t> slot = mailboxes_.acquire();
    if (!slot)
        return refuse("all " + std::to_string(mailboxes_.slots()) +
                      " RDMA mailbox slots are in use");
    // Both are powers of two, so is the smaller one.
    const size_t ring = std::min<size_t>(client.requested_ring_size, options_.max_ring_size);

    auto session = std::make_unique<ServerSession>(*this, *slot, options_);
    by_slot_[*slot] = session.get();  // from here on the session's destructor cleans up
    live_.push_back(session.get());
    Link& link = session->link_;
    if (!link.init(device_, qp_options, ring, session_fd, options_.completion_timeout, error))
        return nullptr;
    session->mailbox_mr_ =
        link.pd().register_memory(mailboxes_.slot_addr(*slot), 1, Access::RemoteWrite, error);
    if (session->mailbox_mr_ == nullptr)
        return nullptr;
    if (!link.attach(client.area_addr, client.area_rkey, client.ring_size,
                     options_.max_record_payload, client.qp, error))
        return nullptr;

    reply = Hello{};
    reply.role = HelloRole::Server;
    reply.qp = link.endpoint();
    reply.area_addr = link.area_addr();
    reply.area_rkey = link.area_rkey();
    reply.ring_size = ring;
    reply.mailbox_addr = session->mailbox_mr_->remote_addr(mailboxes_.slot_addr(*slot));
    reply.mailbox_rkey = session->mailbox_mr_->rkey();
    return session;
}

std::unique_ptr<ServerSession> ServerEndpoint::accept_on_socket(int session_fd,
                                                                const QpOptions& qp_options,
                                                                std::string& error) {
    Hello client;
    if (!recv_hello(session_fd, client, options_.completion_timeout, error)) {
        if (qp_options.soft_wire_fd >= 0)
            ::close(qp_options.soft_wire_fd);
        return nullptr;
    }
    Hello reply;
    auto session = accept(session_fd, client, reply, qp_options, error);
    if (session == nullptr || !send_hello(session_fd, reply, options_.completion_timeout, error))
        return nullptr;
    return session;
}

size_t ServerEndpoint::poll(std::span<ServerSession*> ready) {
    const size_t n =
        mailboxes_.scan(std::span(scratch_).first(std::min(ready.size(), scratch_.size())));
    size_t out = 0;
    for (size_t i = 0; i < n; ++i) {
        if (ServerSession* s = by_slot_[scratch_[i]]; s != nullptr && !s->closing_) {
            s->note_mailbox();
            ready[out++] = s;
        }
    }
    return out;
}

size_t ServerEndpoint::prepare_to_block(std::span<ServerSession*> ready, bool& settled) {
    settled = true;
    for (ServerSession* s : live_) {
        if (s->closing_ || s->broken() || s->peer_closed())
            continue;  // reported as ready below, broken ones even with input paused
                       // (unless closing: flush_step() polls those)
        // Completions first: a data WRITE's completion may owe its client a doorbell.
        if (!s->progress())
            continue;
        if (s->link_.outstanding_signaled()) {
            settled = false;
            continue;
        }
        // The flag WRITE must have completed before the mailboxes are looked at again;
        // until then blocking is not safe.
        if (!s->rx_armed_ && s->arm_read())
            settled = false;
    }
    // A mailbox byte alone is no reason to stay awake: what an honest client published
    // before it is readable below (RC order), and one it sets later finds our rx flag (set
    // above) and rings. A client setting its byte over and over with nothing behind it
    // would otherwise keep the worker from ever blocking. The scan still counts the
    // observations (the stall check in read(), which so fails a torn record only while the
    // worker is awake for something else: until then it holds nothing but its own session).
    (void)poll(ready);
    size_t n = 0;
    for (ServerSession* s : live_) {
        if (n == ready.size())
            break;
        if (s->closing_)
            continue;
        const bool input = s->readable() && (!s->input_paused_ || s->broken());
        if (input || (s->write_blocked() && s->writable()))
            ready[n++] = s;
    }
    return n;
}

void ServerEndpoint::await_completions(std::chrono::microseconds max) {
    for (ServerSession* s : live_) {
        if (!s->closing_ && !s->broken() && s->link_.outstanding_signaled()) {
            s->link_.wait_for_completion(max);
            return;
        }
    }
}

void ServerEndpoint::detach(uint32_t slot) noexcept {
    if (slot < by_slot_.size() && by_slot_[slot] != nullptr) {
        live_.erase(std::find(live_.begin(), live_.end(), by_slot_[slot]));
        by_slot_[slot] = nullptr;
        mailboxes_.release(slot);
    }
}

// ---------------------------------------------------------------- session

ServerSession::ServerSession(ServerEndpoint& endpoint, uint32_t slot, const ServerOptions& options)
    : endpoint_(endpoint), slot_(slot), options_(options) {}

ServerSession::~ServerSession() {
    mailbox_mr_.reset();      // the client can no longer set its byte ...
    link_.shutdown();         // ... nor reach its area: the QP is gone
    endpoint_.detach(slot_);  // only now may another client get this slot
}

IoResult ServerSession::read(std::span<std::byte> out) {
    RecordState state = RecordState::Empty;
    const IoResult result = link_.read_some(out, state);
    if (result.status != IoStatus::WouldBlock)
        return result;
    if (state == RecordState::InFlight) {
        // RC order: a record being written when mailbox observation e had been made is
        // complete before any mailbox WRITE that can cause observation e + 2 (the one
        // for e + 1 may still be the previous record's). Still incomplete then: garbage.
        const uint64_t pos = link_.read_position();
        if (!stalled_ || stall_pos_ != pos) {
            stalled_ = true;
            stall_pos_ = pos;
            stall_epoch_ = mailbox_epoch_;
        } else if (mailbox_epoch_ >= stall_epoch_ + 2) {
            link_.fail("the record at ring position " + std::to_string(pos) +
                       " is still incomplete after two further mailbox signals: the client "
                       "wrote garbage into its ring");
            return {0, IoStatus::Error};
        }
    }
    return {0, IoStatus::WouldBlock};
}

IoResult ServerSession::write(std::span<const std::byte> bytes) {
    if (const IoStatus s = link_.failure_status(); s != IoStatus::Ok)
        return {0, s};
    if (bytes.empty())
        return {0, IoStatus::Ok};
    if (!progress())
        return {0, link_.failure_status()};
    Link::Batch batch(link_);  // the records and the READ below leave together
    size_t written = 0;
    while (written < bytes.size() && link_.can_post(4)) {
        const size_t fit = link_.payload_that_fits();
        if (fit == 0)
            break;
        const size_t n = std::min(bytes.size() - written, fit);
        // Selective signaling: only the last record this call places is signaled; its
        // completion is when a sleeping client gets its doorbell (Link::wake_peer_reader).
        const bool last = written + n == bytes.size() || link_.payload_that_fits_after(n) == 0 ||
                          !link_.can_post(4 + 2);
        if (!link_.post_record(bytes.subspan(written, n), last))
            return {written, link_.failure_status()};
        written += n;
    }
    tx_blocked_ = written < bytes.size();
    if (tx_blocked_ || link_.out().used() > link_.out().size() / 2)
        request_space();  // eager READ of the client's position (L5 §IV-D)
    if (link_.broken())
        return {written, link_.failure_status()};
    return {written, written > 0 ? IoStatus::Ok : IoStatus::WouldBlock};
}

void ServerSession::request_space() {
    if (!link_.read_in_flight() && link_.can_post(1))
        (void)link_.post_read_pos();
}

bool ServerSession::progress() {
    if (!link_.progress())
        return false;
    // Still full after a fresh READ: ask the client to ring when it has consumed (flag
    // WRITE, then a READ ordered after it: Dekker with the client's consume + exchange).
    if (tx_blocked_ && !tx_armed_ && !link_.read_in_flight() && link_.payload_that_fits() == 0 &&
        link_.can_post(2)) {
        if (!link_.post_peer_flag(kPeerTxWaitingOffset, false) || !link_.post_read_pos())
            return false;
        tx_armed_ = true;
    }
    return !link_.broken();
}

bool ServerSession::readable() {
    if (link_.broken() || link_.peer_closed())
        return true;
    const RecordState state = link_.check();
    return state == RecordState::Ready || state == RecordState::Corrupt;
}

bool ServerSession::writable() {
    return link_.broken() || link_.peer_closed() || link_.payload_that_fits() > 0;
}

void ServerSession::on_socket_readable() {
    link_.on_socket_readable();
    // The client cleared whichever of our flags made it ring; re-arm when needed.
    rx_armed_ = false;
    tx_armed_ = false;
    if (tx_blocked_)
        request_space();
}

bool ServerSession::arm_read() {
    if (rx_armed_)
        return true;
    if (!link_.can_post(1) || !link_.post_peer_flag(kPeerRxWaitingOffset, true))
        return false;
    rx_armed_ = true;
    return true;
}

bool ServerSession::flush() {
    for (int round = 0; round < 4 && link_.outstanding_signaled(); ++round) {
        if (!link_.await(link_.last_signaled()))
            return false;
        (void)progress();  // may post the next READ/flag; wait for those too
    }
    return !link_.broken();
}

bool ServerSession::flush_step() {
    (void)link_.progress();  // fails the link once a request outlived the timeout
    return link_.broken() || !link_.outstanding_signaled();
}

}  // namespace l5pg::rdma
