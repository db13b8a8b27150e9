#include "daemon/rdma_wire.hpp"

#include <event2/listener.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <span>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "daemon/log_limiter.hpp"
#include "daemon/secure_random.hpp"

namespace l5pg::daemon {
namespace {

// A client has this long to send its whole greeting after connecting.
constexpr timeval kGreetingTimeout{5, 0};

rdma::WireToken random_token() {
    rdma::WireToken token{};
    fill_secure_random(std::as_writable_bytes(std::span(token)));
    return token;
}

}  // namespace

// ---------------------------------------------------------------- registry

void WireRegistry::sweep_locked(clock::time_point now) {
    for (auto it = entries_.begin(); it != entries_.end();) {
        if (it->second.deadline <= now)
            it = entries_.erase(it);
        else
            ++it;
    }
}

rdma::WireToken WireRegistry::offer(clock::time_point deadline) {
    std::lock_guard lock(mutex_);
    sweep_locked(clock::now());
    for (;;) {
        const rdma::WireToken token = random_token();
        if (entries_.emplace(token, Entry{deadline, UniqueFd{}}).second)
            return token;
    }
}

bool WireRegistry::deliver(const rdma::WireToken& token, UniqueFd fd) {
    std::lock_guard lock(mutex_);
    sweep_locked(clock::now());
    auto it = entries_.find(token);
    if (it == entries_.end() || it->second.fd.valid())
        return false;  // `fd` closes here
    it->second.fd = std::move(fd);
    return true;
}

UniqueFd WireRegistry::take(const rdma::WireToken& token) {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(token);
    if (it == entries_.end() || !it->second.fd.valid())
        return UniqueFd{};
    UniqueFd fd = std::move(it->second.fd);
    entries_.erase(it);
    return fd;
}

void WireRegistry::cancel(const rdma::WireToken& token) {
    std::lock_guard lock(mutex_);
    entries_.erase(token);
}

// ---------------------------------------------------------------- listener

struct SoftWireListener::Pending {
    SoftWireListener* owner = nullptr;
    UniqueFd fd;
    EventPtr event;
    EventPtr deadline;  // one-shot: unlike a timeout on `event`, a byte does not re-arm it
    std::array<std::byte, rdma::kWireHelloSize> greeting{};
    size_t have = 0;
};

SoftWireListener::SoftWireListener(event_base* base, const std::string& address, uint16_t port,
                                   int backlog, WireRegistry& registry, size_t max_pending)
    : base_(base),
      registry_(registry),
      max_pending_(max_pending),
      listener_(address, port, backlog) {
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    if (::getsockname(listener_.fd(), reinterpret_cast<sockaddr*>(&bound), &len) != 0)
        throw std::runtime_error(std::string("getsockname: ") + std::strerror(errno));
    port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    evl_ = evconnlistener_new(base, accept_cb, this, LEV_OPT_CLOSE_ON_EXEC, 0, listener_.fd());
    resume_.reset(evtimer_new(base, resume_cb, this));
    if (evl_ == nullptr || resume_ == nullptr)
        throw std::runtime_error("evconnlistener_new failed for the soft RDMA wire listener");
    evconnlistener_set_error_cb(evl_, accept_error_cb);
}

// As for the main listeners (Server::on_accept_error): out of descriptors, accept() fails
// at once for as long as a connection waits, so pause instead of retrying every loop turn.
void SoftWireListener::accept_error_cb(evconnlistener* listener, void* arg) {
    const int err = EVUTIL_SOCKET_ERROR();
    auto* self = static_cast<SoftWireListener*>(arg);
    evconnlistener_disable(listener);
    evtimer_add(self->resume_.get(), &kAcceptPause);
    client_logs().soft_wire.log(spdlog::level::warn,
                                "soft RDMA wire listener: accept() failed: {}; retrying in {} ms",
                                std::strerror(err), kAcceptPause.tv_usec / 1000);
}

void SoftWireListener::resume_cb(int, short, void* arg) {
    evconnlistener_enable(static_cast<SoftWireListener*>(arg)->evl_);
}

SoftWireListener::~SoftWireListener() {
    if (evl_ != nullptr)
        evconnlistener_free(evl_);
    pending_.clear();
}

void SoftWireListener::accept_cb(evconnlistener*, int fd, sockaddr*, int, void* arg) {
    auto* self = static_cast<SoftWireListener*>(arg);
    UniqueFd owned(fd);
    if (self->pending_.size() >= self->max_pending_) {
        if (!self->refusing_)
            spdlog::warn("soft RDMA wire connections refused: {} are waiting for their greeting",
                         self->pending_.size());
        self->refusing_ = true;
        return;  // closes fd
    }
    auto pending = std::make_unique<Pending>();
    pending->owner = self;
    pending->fd = std::move(owned);
    pending->event.reset(event_new(self->base_, fd, EV_READ | EV_PERSIST, read_cb, pending.get()));
    pending->deadline.reset(evtimer_new(self->base_, deadline_cb, pending.get()));
    if (pending->event == nullptr || pending->deadline == nullptr)
        return;  // closes fd
    event_add(pending->event.get(), nullptr);
    evtimer_add(pending->deadline.get(), &kGreetingTimeout);
    Pending* raw = pending.get();
    self->pending_.emplace(raw, std::move(pending));
}

void SoftWireListener::deadline_cb(int, short, void* arg) {
    auto* pending = static_cast<Pending*>(arg);
    client_logs().soft_wire.log(
        spdlog::level::info, "soft RDMA wire connection closed: no complete greeting within {} s",
        kGreetingTimeout.tv_sec);
    pending->owner->drop(pending);
}

void SoftWireListener::drop(Pending* pending) {
    pending_.erase(pending);
    refusing_ = pending_.size() >= max_pending_;
}

void SoftWireListener::read_cb(int fd, short, void* arg) {
    auto* pending = static_cast<Pending*>(arg);
    SoftWireListener* self = pending->owner;
    const ssize_t n = ::recv(fd, pending->greeting.data() + pending->have,
                             pending->greeting.size() - pending->have, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        self->drop(pending);
        return;
    }
    if (n < 0)
        return;
    pending->have += static_cast<size_t>(n);
    if (pending->have < pending->greeting.size())
        return;
    rdma::WireToken token{};
    const bool valid = rdma::decode_wire_hello(pending->greeting, token);
    UniqueFd wire = std::move(pending->fd);
    self->drop(pending);  // frees the event before its fd moves on
    if (!valid) {
        client_logs().soft_wire.log(spdlog::level::info,
                                    "soft RDMA wire connection closed: invalid greeting");
        return;
    }
    if (!self->registry_.deliver(token, std::move(wire)))
        client_logs().soft_wire.log(spdlog::level::info,
                                    "soft RDMA wire connection closed: unknown or expired token");
}

}  // namespace l5pg::daemon
