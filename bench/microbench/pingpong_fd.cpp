// Ping-pong over kernel byte streams: a Unix socket pair, TCP loopback, a pipe pair.
// Blocking read()/write(): each side sleeps in the kernel while waiting.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "bench/microbench/pingpong.hpp"
#include "bench/microbench/pingpong_loop.hpp"

namespace l5pg::microbench {
namespace {

class FdLink {
  public:
    FdLink(int read_fd, int write_fd) noexcept : rfd_(read_fd), wfd_(write_fd) {}

    void send(const std::byte* p, size_t n) {
        while (n > 0) {
            const ssize_t k = ::write(wfd_, p, n);
            if (k < 0) {
                if (errno == EINTR)
                    continue;
                throw_errno("write");
            }
            p += k;
            n -= static_cast<size_t>(k);
        }
    }

    void recv(std::byte* p, size_t n) {
        while (n > 0) {
            const ssize_t k = ::read(rfd_, p, n);
            if (k < 0) {
                if (errno == EINTR)
                    continue;
                throw_errno("read");
            }
            if (k == 0)
                throw BenchError("read: the peer closed the connection");
            p += k;
            n -= static_cast<size_t>(k);
        }
    }

  private:
    int rfd_;
    int wfd_;
};

void set_nodelay(int fd) {
    const int one = 1;
    if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
        throw_errno("setsockopt TCP_NODELAY");
}

// A connected TCP pair over 127.0.0.1 (ephemeral port), both ends with TCP_NODELAY.
FdPair make_tcp_pair() {
    UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (listener.get() < 0)
        throw_errno("socket");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof addr;
    if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listener.get(), 1) != 0 ||
        ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0)
        throw_errno("bind/listen on 127.0.0.1");
    UniqueFd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (client.get() < 0)
        throw_errno("socket");
    // Completes against the listen backlog without an accept() yet.
    if (::connect(client.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
        throw_errno("connect to 127.0.0.1");
    UniqueFd server(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (server.get() < 0)
        throw_errno("accept");
    set_nodelay(client.get());
    set_nodelay(server.get());
    return {std::move(client), std::move(server)};
}

}  // namespace

PingPongRun pingpong_fd(FdKind kind, size_t msg_bytes, const Timing& timing,
                        const Placement& placement) {
    // The client reads from client_rx and writes to client_tx; the server the other ends.
    UniqueFd client_rx, client_tx, server_rx, server_tx;
    if (kind == FdKind::Pipe) {
        FdPair to_server = make_pipe();
        FdPair to_client = make_pipe();
        client_tx = std::move(to_server.b);
        server_rx = std::move(to_server.a);
        server_tx = std::move(to_client.b);
        client_rx = std::move(to_client.a);
    } else {
        FdPair pair = kind == FdKind::Unix ? make_socketpair() : make_tcp_pair();
        client_tx = UniqueFd(::dup(pair.a.get()));
        client_rx = std::move(pair.a);
        server_tx = UniqueFd(::dup(pair.b.get()));
        server_rx = std::move(pair.b);
        if (client_tx.get() < 0 || server_tx.get() < 0)
            throw_errno("dup");
    }
    auto server = [&](ChildReport& report) {
        client_rx.reset();  // so that the client sees EOF if we die, and vice versa
        client_tx.reset();
        FdLink link(server_rx.get(), server_tx.get());
        return echo_server(link, msg_bytes, report);
    };
    auto client = [&] {
        server_rx.reset();
        server_tx.reset();
        FdLink link(client_rx.get(), client_tx.get());
        return echo_client(link, msg_bytes, timing);
    };
    return run_two_processes(placement, server, client);
}

}  // namespace l5pg::microbench
