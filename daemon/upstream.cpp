#include "daemon/upstream.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include <fmt/format.h>

namespace l5pg::daemon {
namespace {

UpstreamConnect connect_unix(const config::UpstreamConfig& cfg) {
    UpstreamConnect result;
    const std::string path = describe_upstream(cfg);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof addr.sun_path) {
        result.error = ENAMETOOLONG;
        return result;
    }
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    result.fd.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!result.fd.valid() ||
        ::connect(result.fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
        // EAGAIN: Postgres's listen queue is full; Session::connect_upstream() retries.
        result.error = errno;
        result.fd.reset();
    }
    return result;
}

// A socket connecting (or connected) to `address`, or the errno of its immediate failure.
UpstreamConnect connect_to(const addrinfo& address) {
    UpstreamConnect result;
    result.fd.reset(::socket(address.ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!result.fd.valid()) {
        result.error = errno;
        return result;
    }
    const int one = 1;
    ::setsockopt(result.fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(result.fd.get(), address.ai_addr, address.ai_addrlen) != 0) {
        if (errno == EINPROGRESS) {
            result.in_progress = true;
        } else {
            result.error = errno;
            result.fd.reset();
        }
    }
    return result;
}

// The name is looked up here, on the worker's thread (README: upstream.host). Each address
// in turn until one does not fail at once ("localhost" as ::1 without IPv6, then 127.0.0.1),
// as libpq does; a connect that fails later is not retried on the next.
UpstreamConnect connect_tcp(const config::UpstreamConfig& cfg) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const std::string service = std::to_string(cfg.port);
    if (const int rc = ::getaddrinfo(cfg.host.c_str(), service.c_str(), &hints, &found); rc != 0) {
        UpstreamConnect result;
        result.error = EHOSTUNREACH;
        result.lookup_failure = rc == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(rc);
        return result;
    }
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(found, &::freeaddrinfo);
    UpstreamConnect result;
    for (const addrinfo* address = found; address != nullptr; address = address->ai_next) {
        result = connect_to(*address);
        if (result.fd.valid())
            break;
    }
    return result;
}

}  // namespace

UpstreamConnect start_upstream_connect(const config::UpstreamConfig& cfg) {
    return cfg.host.empty() ? connect_unix(cfg) : connect_tcp(cfg);
}

int finish_upstream_connect(int fd) noexcept {
    int error = 0;
    socklen_t len = sizeof error;
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0)
        return errno;
    return error;
}

std::string describe_upstream(const config::UpstreamConfig& cfg) {
    if (cfg.host.empty())
        return config::socket_path(cfg.unix_socket_dir, cfg.port);
    return fmt::format("{}:{}", cfg.host, cfg.port);
}

}  // namespace l5pg::daemon
