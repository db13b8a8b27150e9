// The soft RDMA device's second connection ("wire", transport/rdma/README.md): after l5pgd
// offers an RDMA upgrade with a random token, the client connects to rdma.soft_port and
// sends the token (rdma/channel/offer.hpp); the session that made the offer then takes
// the connection and hands it to its soft queue pair.
//
// The listener runs on the main thread's event base; sessions run on workers. The
// registry in between is the only shared state (a mutex; a handful of calls per upgrade).
// Only offered tokens are kept, each until a deadline: a stranger connecting to the soft
// port can neither fill memory nor take over another client's wire (16 random bytes).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "daemon/event_ptr.hpp"
#include "daemon/listener.hpp"
#include "daemon/unique_fd.hpp"
#include "transport/rdma/channel/offer.hpp"

struct evconnlistener;

namespace l5pg::daemon {

class WireRegistry {
  public:
    using clock = std::chrono::steady_clock;

    // A new random token, expected until `deadline`.
    [[nodiscard]] rdma::WireToken offer(clock::time_point deadline);
    // A wire connection presented `token`. Kept if the token was offered and is still
    // waiting; otherwise the connection is closed and false returned.
    bool deliver(const rdma::WireToken& token, UniqueFd fd);
    // The connection for `token` once it arrived (the offer is used up), else invalid.
    [[nodiscard]] UniqueFd take(const rdma::WireToken& token);
    // Withdraws an offer (closing a connection that arrived for it).
    void cancel(const rdma::WireToken& token);

  private:
    struct Entry {
        clock::time_point deadline;
        UniqueFd fd;
    };
    void sweep_locked(clock::time_point now);

    std::mutex mutex_;
    std::map<rdma::WireToken, Entry> entries_;
};

// Accepts wire connections on listen.tcp_address:rdma.soft_port, reads their greeting and
// delivers them to the registry. Main thread only. Anybody may connect, so connections
// still owing their greeting are capped at `max_pending` (further ones are closed at
// once) and each gets an absolute deadline that no trickle of bytes extends.
class SoftWireListener {
  public:
    SoftWireListener(event_base* base, const std::string& address, uint16_t port, int backlog,
                     WireRegistry& registry, size_t max_pending);
    ~SoftWireListener();
    SoftWireListener(const SoftWireListener&) = delete;
    SoftWireListener& operator=(const SoftWireListener&) = delete;

    // The bound port (the configured one, or the one the OS picked for 0).
    [[nodiscard]] uint16_t port() const noexcept { return port_; }

  private:
    struct Pending;
    static void accept_cb(evconnlistener* listener, int fd, sockaddr* addr, int len, void* arg);
    static void read_cb(int fd, short what, void* arg);
    static void deadline_cb(int fd, short what, void* arg);
    static void accept_error_cb(evconnlistener* listener, void* arg);
    static void resume_cb(int fd, short what, void* arg);
    void drop(Pending* pending);

    event_base* base_;
    WireRegistry& registry_;
    const size_t max_pending_;
    bool refusing_ = false;  // at the cap: logged once until a slot frees up
    TcpListener listener_;
    uint16_t port_ = 0;
    evconnlistener* evl_ = nullptr;
    EventPtr resume_;  // listens again after an accept() error paused the listener
    std::map<Pending*, std::unique_ptr<Pending>> pending_;
};

}  // namespace l5pg::daemon
