#include "transport/rdma/channel/client.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transport/rdma/buffer.hpp"
#include "transport/rdma/sys.hpp"
#include "transport/wait/block.hpp"
#include "transport/wait/deadline.hpp"

namespace l5pg::rdma {

std::unique_ptr<ClientChannel> ClientChannel::create(Device& device, int session_fd,
                                                     const ClientOptions& options,
                                                     const QpOptions& qp_options,
                                                     std::string& error) {
    auto channel = std::make_unique<ClientChannel>();
    channel->options_ = options;
    if (!valid_ring_size(options.c2s_ring_size)) {
        if (qp_options.soft_wire_fd >= 0)
            ::close(qp_options.soft_wire_fd);
        error = "client->server ring size must be a power of two between 4 KiB and 256 MiB";
        return nullptr;
    }
    if (!channel->link_.init(device, qp_options, options.s2c_ring_size, session_fd,
                             options.completion_timeout, error))
        return nullptr;
    return channel;
}

Hello ClientChannel::hello() const {
    Hello h;
    h.role = HelloRole::Client;
    h.qp = link_.endpoint();
    h.area_addr = link_.area_addr();
    h.area_rkey = link_.area_rkey();
    h.ring_size = link_.local_ring_size();
    h.requested_ring_size = options_.c2s_ring_size;
    return h;
}

bool ClientChannel::connect(const Hello& server, std::string& error) {
    if (connected_) {
        error = "RDMA channel already connected";
        return false;
    }
    if (server.role != HelloRole::Server) {
        error = "expected the server's RDMA hello";
        return false;
    }
    if (server.qp.kind != link_.endpoint().kind) {
        error = std::string("the server uses the ") + to_string(server.qp.kind) +
                " RDMA device, we use " + to_string(link_.endpoint().kind);
        return false;
    }
    // We pay the staging memory for the server's ring: never more than we asked for.
    if (server.ring_size > options_.c2s_ring_size) {
        error = "the server granted a larger client->server ring than requested";
        return false;
    }
    if (!link_.attach(server.area_addr, server.area_rkey, server.ring_size,
                      options_.max_record_payload, server.qp, error))
        return false;
    server_ = server;
    connected_ = true;
    return true;
}

// Ends a batch: optionally READs the server's position, then (to publish, or just to
// have a signaled request last) sets our mailbox byte, and waits for all of it. The
// mailbox completion is what wakes a sleeping server (Link::wake_peer_reader).
bool ClientChannel::flush(bool publish, bool refresh) {
    if (refresh && !link_.post_read_pos())
        return false;
    if ((publish || link_.last_posted() != link_.last_signaled()) &&
        !link_.post_one(WrKind::Publish, server_.mailbox_addr, server_.mailbox_rkey, true))
        return false;
    return !link_.outstanding_signaled() || link_.await(link_.last_signaled());
}

IoResult ClientChannel::write(std::span<const std::byte> bytes) {
    if (!connected_)
        return {0, IoStatus::Error};
    if (const IoStatus s = link_.failure_status(); s != IoStatus::Ok)
        return {0, s};
    if (bytes.empty())
        return {0, IoStatus::Ok};
    if (!link_.progress())
        return {0, link_.failure_status()};
    // The records and the mailbox WRITE leave together (the flushes below wait for
    // completions, which starts what is held).
    Link::Batch batch(link_);
    size_t written = 0;
    bool unpublished = false;
    bool refreshed = false;
    while (written < bytes.size()) {
        if (!link_.can_post(4)) {  // two record WRITEs, a READ, the mailbox
            if (!flush(unpublished, false))
                return {written, link_.failure_status()};
            unpublished = false;
            continue;
        }
        const size_t fit = link_.payload_that_fits();
        if (fit == 0) {
            if (refreshed)
                break;
            // Let the server see what we wrote, and learn how far it has read.
            if (!flush(unpublished, true))
                return {written, link_.failure_status()};
            unpublished = false;
            refreshed = true;
            continue;
        }
        const size_t n = std::min(bytes.size() - written, fit);
        if (!link_.post_record(bytes.subspan(written, n), false))
            return {written, link_.failure_status()};
        written += n;
        unpublished = true;
    }
    // Eager READ (L5 §IV-D): with the ring more than half full, learn the server's
    // position now, in the same round trip as the mailbox, so the next write rarely
    // has to wait for it.
    if (unpublished && !flush(true, link_.out().used() > server_.ring_size / 2))
        return {written, link_.failure_status()};
    return {written, written > 0 ? IoStatus::Ok : IoStatus::WouldBlock};
}

IoResult ClientChannel::read(std::span<std::byte> out) {
    if (!connected_)
        return {0, IoStatus::Error};
    RecordState state = RecordState::Empty;
    return link_.read_some(out, state);
}

bool ClientChannel::readable() {
    if (!connected_ || link_.broken() || link_.peer_closed())
        return true;
    const RecordState state = link_.check();
    return state == RecordState::Ready || state == RecordState::Corrupt;
}

bool ClientChannel::writable() {
    return !connected_ || link_.broken() || link_.peer_closed() || link_.payload_that_fits() > 0;
}

bool ClientChannel::arm_read() {
    if (readable())
        return false;
    // Our flag WRITE must have completed before we look at the ring again.
    if (!link_.post_peer_flag(kPeerRxWaitingOffset, true) || !link_.await(link_.last_signaled()))
        return false;
    return !readable();
}

bool ClientChannel::arm_write() {
    if (writable())
        return false;
    // Nothing older may be in flight: the READ below must be ordered after the flag.
    if (link_.outstanding_signaled() && !link_.await(link_.last_signaled()))
        return false;
    if (!link_.post_peer_flag(kPeerTxWaitingOffset, false) || !link_.post_read_pos() ||
        !link_.await(link_.last_signaled()))
        return false;
    return !writable();
}

namespace {

// wait_readable()/wait_writable() as a wait::Waiter: block.hpp's steps, giving up at a
// deadline (then ready() decides).
class DeadlineWaiter {
  public:
    DeadlineWaiter(ClientChannel& channel, bool for_write, const wait::WaitPolicy& policy,
                   wait::Deadline deadline) noexcept
        : c_(channel), for_write_(for_write), policy_(policy), deadline_(deadline) {}

    bool ready() { return for_write_ ? c_.writable() : c_.readable(); }
    wait::WaitPolicy policy() const noexcept { return policy_; }
    bool arm() { return for_write_ ? c_.arm_write() : c_.arm_read(); }
    void disarm() noexcept {}  // a flag the server finds set costs one spurious doorbell
    wait::Woken sleep() {
        const int ms = deadline_.poll_ms();
        if (ms == 0)
            return ready() ? wait::Woken::Look : wait::Woken::Stop;
        pollfd p{c_.session_fd(), POLLIN, 0};
        const int rc = wait::poll_raw(&p, 1, ms);
        if (rc > 0)
            c_.on_socket_readable();
        else if (rc < 0 && errno != EINTR)
            return wait::Woken::Stop;
        return wait::Woken::Again;
    }

  private:
    ClientChannel& c_;
    bool for_write_;
    wait::WaitPolicy policy_;
    wait::Deadline deadline_;
};

}  // namespace

bool ClientChannel::wait_until(bool for_write, std::chrono::milliseconds timeout) {
    DeadlineWaiter waiter(*this, for_write, options_.budget, wait::Deadline::after(timeout));
    return wait::block_until_ready(waiter);
}

bool ClientChannel::wait_readable(std::chrono::milliseconds timeout) {
    return wait_until(false, timeout);
}

bool ClientChannel::wait_writable(std::chrono::milliseconds timeout) {
    return wait_until(true, timeout);
}

}  // namespace l5pg::rdma
