// RDMA sessions (docs/wire-format.md section 5): the two-step upgrade on the TCP socket
// (request -> offer 'R', client Hello -> 'L' + our Hello, or 'N' at either step and the
// connection carries on as plain TCP). Once accepted, the session's end is an
// RdmaClientEnd (client_end_rdma.cpp), driven by the worker's polling loop; the session
// socket only carries doorbell bytes and EOF.
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/client_end_rdma.hpp"
#include "daemon/rdma_wire.hpp"
#include "daemon/session.hpp"
#include "daemon/worker.hpp"

namespace l5pg::daemon {
namespace {

// How long the client has to open the soft device's wire connection after the offer.
constexpr auto kWireWait = std::chrono::seconds(5);
// Retry intervals while waiting for the wire connection to arrive on the main thread: from
// 1 ms, doubling up to 32 ms (hundreds of clients that never connect theirs must not make
// a worker wake a thousand times a second for each).
constexpr std::chrono::microseconds kFirstWireRetry{1000};
constexpr std::chrono::microseconds kLastWireRetry{32000};

}  // namespace

bool Session::send_now(std::span<const std::byte> bytes) {
    // Only used for the few bytes of the handshake on a fresh socket: they always fit.
    // Through the stream: a TLS client that asks for an upgrade gets its answer inside TLS.
    const ssize_t n = stream_.send(bytes.data(), bytes.size());
    return n == static_cast<ssize_t>(bytes.size());
}

std::optional<std::string> Session::ring_size_refusal(uint64_t a, uint64_t b) const {
    const uint64_t max = worker_.config().rdma.max_ring_size;
    if (a > max || b > max)
        return fmt::format("ring size above rdma.max_ring_size ({})", max);
    return std::nullopt;
}

std::optional<std::string> Session::rdma_refusal(const protocol::L5UpgradeRequest& req) {
    const config::RdmaConfig& cfg = worker_.config().rdma;
    if (transport_ != Transport::Tcp)
        return "RDMA needs the TCP listener";
    if (!cfg.enabled)
        return "rdma.enabled is false";
    // No client on TCP is served: allocate nothing for it (its StartupMessage, sent over
    // TCP after the decline, is refused with 28000).
    if (worker_.admission().auth.tcp == config::AuthMethod::Reject)
        return "auth.tcp is reject";
    // The offer's token and the Hellos' rkeys would cross in clear; the shim negotiates
    // inside TLS unless its L5PG_SSLMODE is disable.
    if (worker_.admission().tls_mode == config::TlsMode::Require && !stream_.tls())
        return "tls.mode is require and the upgrade request came in clear (the client's "
               "L5PG_SSLMODE is disable)";
    if (worker_.rdma_endpoint() == nullptr)
        return worker_.rdma_unavailable();
    if (std::optional<std::string> refusal =
            ring_size_refusal(req.c2s_ring_size, req.s2c_ring_size))
        return refusal;
    // A place is held from here on (its StartupMessage would be refused: no channel).
    if (!has_session_place())
        return "limits.max_sessions reached";
    return reserve_rdma_memory(req.c2s_ring_size, req.s2c_ring_size);
}

// What accept() allocates: the client->server ring (at most rdma.max_ring_size, checked
// before) and a copy of the server->client one. Taken at the request, and again for the
// sizes the Hello names, from which accept() allocates.
std::optional<std::string> Session::reserve_rdma_memory(uint64_t c2s, uint64_t s2c) {
    const uint64_t rings = c2s + s2c;
    const uint64_t max = worker_.config().rdma.max_memory;
    const bool reserved = rdma_memory_.held()
                              ? rdma_memory_.resize(rings, max)
                              : (rdma_memory_ = worker_.rdma_memory().try_take(rings, max)).held();
    if (!reserved)
        return fmt::format(
            "rdma.max_memory reached ({} bytes of rings in use, {} more asked, {} allowed)",
            worker_.rdma_memory().taken(), rings, max);
    return std::nullopt;
}

void Session::handle_rdma_upgrade(const protocol::L5UpgradeRequest& req) {
    startup_.clear();
    worker_.foreign_fds().close_later(std::move(passed_fd_));
    if (std::optional<std::string> refusal = rdma_refusal(req)) {
        decline_rdma(*refusal);
        return;
    }
    rdma::Offer offer;
    offer.kind = worker_.rdma_device_kind();
    if (offer.kind == rdma::DeviceKind::Soft) {
        const auto deadline = std::chrono::steady_clock::now() + kWireWait +
                              std::chrono::milliseconds(worker_.config().limits.startup_timeout_ms);
        wire_token_ = worker_.rdma_shared().registry->offer(deadline);
        wire_offered_ = true;
        offer.token = wire_token_;
        offer.soft_port = worker_.rdma_shared().soft_port;
    }
    std::array<std::byte, 1 + rdma::kOfferSize> answer{};
    answer[0] = rdma::kOfferTag;
    rdma::encode_offer(offer,
                       std::span<std::byte, rdma::kOfferSize>(answer.data() + 1, rdma::kOfferSize));
    if (!send_now(answer)) {
        close("cannot answer the RDMA upgrade request", true);
        return;
    }
    rdma_phase_ = RdmaPhase::AwaitHello;
    spdlog::debug("session {}: RDMA upgrade offered ({} device)", id_, rdma::to_string(offer.kind));
}

void Session::withdraw_wire_offer() {
    if (!wire_offered_)
        return;
    wire_offered_ = false;
    if (WireRegistry* registry = worker_.rdma_shared().registry)
        registry->cancel(wire_token_);
}

void Session::decline_rdma(std::string_view reason) {
    withdraw_wire_offer();
    rdma_memory_.release();
    rdma_phase_ = RdmaPhase::None;
    startup_.clear();
    const std::byte no = protocol::kL5Declined;
    if (!send_now({&no, 1})) {
        close("cannot answer the RDMA upgrade", true);
        return;
    }
    metrics_.upgrade_declined();
    client_logs().upgrade_declined.log(spdlog::level::info, "session {}: RDMA upgrade declined: {}",
                                       id_, reason);
    set_event(client_read_.get(), true);  // the client carries on over TCP
}

void Session::on_rdma_hello() {
    rdma::Hello hello;
    std::string error;
    const bool all_zero = std::all_of(startup_.begin(), startup_.end(),
                                      [](std::byte b) { return b == std::byte{0}; });
    const bool ok = rdma::decode_hello(startup_, hello, error);
    startup_.clear();
    if (all_zero) {
        decline_rdma("the client gave up the upgrade (see its L5PG_DEBUG output)");
        return;
    }
    if (!ok) {
        decline_rdma(error);
        return;
    }
    // The Hello may name other sizes than the request did: checked again.
    if (std::optional<std::string> refusal =
            ring_size_refusal(hello.ring_size, hello.requested_ring_size)) {
        decline_rdma(*refusal);
        return;
    }
    if (std::optional<std::string> refusal =
            reserve_rdma_memory(hello.requested_ring_size, hello.ring_size)) {
        decline_rdma(*refusal);
        return;
    }
    client_hello_ = hello;
    if (!wire_offered_) {
        finish_rdma_accept(UniqueFd{});
        return;
    }
    rdma_phase_ = RdmaPhase::AwaitWire;
    set_event(client_read_.get(), false);
    wire_deadline_ = std::chrono::steady_clock::now() + kWireWait;
    wire_retry_ = kFirstWireRetry;
    try_finish_rdma_accept();
}

void Session::wire_timer_cb(int, short, void* arg) {
    auto* self = static_cast<Session*>(arg);
    if (self->state_ == SessionState::Startup && self->rdma_phase_ == RdmaPhase::AwaitWire)
        self->try_finish_rdma_accept();
}

// The wire connection reaches the main thread's listener; it usually arrived before the
// client's Hello (the client connects it first), else we look again after 1 ms, 2 ms, ...
void Session::try_finish_rdma_accept() {
    UniqueFd wire = worker_.rdma_shared().registry->take(wire_token_);
    if (wire.valid()) {
        wire_offered_ = false;  // take() used the offer up
        finish_rdma_accept(std::move(wire));
        return;
    }
    if (std::chrono::steady_clock::now() >= wire_deadline_) {
        decline_rdma("the client's soft-device wire connection did not arrive");
        return;
    }
    if (!wire_timer_)
        wire_timer_.reset(evtimer_new(worker_.base(), wire_timer_cb, this));
    const timeval retry{0, static_cast<suseconds_t>(wire_retry_.count())};
    evtimer_add(wire_timer_.get(), &retry);
    wire_retry_ = std::min(wire_retry_ * 2, kLastWireRetry);
}

void Session::finish_rdma_accept(UniqueFd wire) {
    rdma::QpOptions qp_options;
    qp_options.soft_wire_fd = wire.valid() ? wire.release() : -1;  // always taken over
    rdma::Hello reply;
    std::string error;
    std::unique_ptr<rdma::ServerSession> channel =
        worker_.rdma_endpoint()->accept(client_.get(), client_hello_, reply, qp_options, error);
    if (channel == nullptr) {
        decline_rdma("cannot set up the RDMA session: " + error);
        return;
    }
    std::array<std::byte, 1 + rdma::kHelloSize> answer{};
    answer[0] = protocol::kL5Accepted;
    rdma::encode_hello(reply,
                       std::span<std::byte, rdma::kHelloSize>(answer.data() + 1, rdma::kHelloSize));
    rdma_phase_ = RdmaPhase::None;
    switch_end(std::make_unique<RdmaClientEnd>(std::move(channel), std::move(rdma_memory_),
                                               worker_.rdma_device_kind() == rdma::DeviceKind::Soft,
                                               *this, worker_, id_));
    if (!send_now(answer)) {
        close("cannot answer the RDMA hello", true);
        return;
    }
    if (stream_.tls() && !stream_.end_tls()) {
        close("the client sent bytes after its RDMA hello inside TLS", true);
        return;
    }
    metrics_.upgrade_accepted();
    transport_ = Transport::Rdma;
    set_event(client_read_.get(), true);  // doorbells and EOF from now on
    spdlog::debug("session {}: upgraded to RDMA ({} device, rings {} / {} bytes)", id_,
                  worker_.rdma_device_name(), reply.ring_size, client_hello_.ring_size);
}

}  // namespace l5pg::daemon
