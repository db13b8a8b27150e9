#include "daemon/upstream.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include <fmt/format.h>

namespace l5pg::daemon {

UpstreamAddresses unix_upstream(const config::UpstreamConfig& cfg) {
    UpstreamAddress address;
    auto& un = reinterpret_cast<sockaddr_un&>(address.storage);
    static_assert(sizeof(sockaddr_un) <= sizeof(sockaddr_storage));
    un.sun_family = AF_UNIX;
    // The configuration refuses a path beyond sun_path when it is loaded.
    const std::string path = describe_upstream(cfg);
    const size_t length = std::min(path.size(), sizeof un.sun_path - 1);
    std::memcpy(un.sun_path, path.data(), length);
    address.length = sizeof un;
    return UpstreamAddresses{{address}, {}};
}

std::optional<UpstreamAddresses> numeric_upstream(const std::string& host,
                                                  const std::string& service) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &found) != 0)
        return std::nullopt;  // a name (or nonsense the resolver will say so about)
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(found, &::freeaddrinfo);
    return tcp_addresses_of(found);
}

UpstreamAddresses tcp_addresses_of(const addrinfo* found) {
    UpstreamAddresses result;
    for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
        if ((a->ai_family != AF_INET && a->ai_family != AF_INET6) ||
            a->ai_addrlen > sizeof(sockaddr_storage) || a->ai_socktype != SOCK_STREAM)
            continue;
        UpstreamAddress address;
        std::memcpy(&address.storage, a->ai_addr, a->ai_addrlen);
        address.length = static_cast<socklen_t>(a->ai_addrlen);
        result.list.push_back(address);
    }
    if (result.list.empty())
        result.lookup_failure = "no IPv4 or IPv6 address";
    return result;
}

// A socket connecting (or connected) to `address`, or the errno of its immediate failure.
// A Unix socket whose listen queue is full fails with EAGAIN: Session::connect_to_address()
// retries.
UpstreamConnect start_upstream_connect(const UpstreamAddress& address) {
    UpstreamConnect result;
    const int family = address.storage.ss_family;
    result.fd.reset(::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!result.fd.valid()) {
        result.error = errno;
        return result;
    }
    if (family != AF_UNIX) {
        const int one = 1;
        ::setsockopt(result.fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        // The kernel's keepalive times, as PgBouncer's tcp_keepalive: a kept server
        // connection whose host went away is found out even while no client uses it.
        ::setsockopt(result.fd.get(), SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    }
    if (::connect(result.fd.get(), reinterpret_cast<const sockaddr*>(&address.storage),
                  address.length) != 0) {
        if (errno == EINPROGRESS) {
            result.in_progress = true;
        } else {
            result.error = errno;
            result.fd.reset();
        }
    }
    return result;
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

std::string describe_address(const UpstreamAddress& address) {
    char text[INET6_ADDRSTRLEN] = "";
    switch (address.storage.ss_family) {
        case AF_UNIX:
            return reinterpret_cast<const sockaddr_un&>(address.storage).sun_path;
        case AF_INET:
            ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(address.storage).sin_addr,
                        text, sizeof text);
            return text;
        case AF_INET6:
            ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(address.storage).sin6_addr,
                        text, sizeof text);
            return text;
        default:
            return "?";
    }
}

}  // namespace l5pg::daemon
