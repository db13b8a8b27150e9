// Connecting to the upstream Postgres: its Unix socket, or TCP when upstream.host is set.
#pragma once

#include <netdb.h>
#include <sys/socket.h>

#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "daemon/unique_fd.hpp"
#include "daemon/upstream_address.hpp"

namespace l5pg::daemon {

// Where to connect, in the order to try: upstream.host's addresses as looked up, or the
// one Unix socket. Empty with `lookup_failure` when the name could not be looked up.
struct UpstreamAddresses {
    std::vector<UpstreamAddress> list;
    std::string lookup_failure;  // why the name could not be looked up
};

struct UpstreamConnect {
    UniqueFd fd;               // non-blocking; valid unless failed
    bool in_progress = false;  // TCP connect still pending: wait for writability
    int error = 0;             // errno of an immediate failure
};

// The Unix socket upstream.* names (upstream.host empty).
[[nodiscard]] UpstreamAddresses unix_upstream(const config::UpstreamConfig& cfg);
// `host` when it is a numeric address (no lookup needed), else nothing.
[[nodiscard]] std::optional<UpstreamAddresses> numeric_upstream(const std::string& host,
                                                                const std::string& service);
// The TCP addresses of a getaddrinfo() answer, in its order.
[[nodiscard]] UpstreamAddresses tcp_addresses_of(const addrinfo* found);

// Starts a non-blocking connect. Unix sockets complete (or fail) immediately.
[[nodiscard]] UpstreamConnect start_upstream_connect(const UpstreamAddress& address);

// For a pending connect that became writable: 0 on success, else the errno (SO_ERROR).
[[nodiscard]] int finish_upstream_connect(int fd) noexcept;

// "/var/run/postgresql/.s.PGSQL.5432" or "host:port", for messages.
[[nodiscard]] std::string describe_upstream(const config::UpstreamConfig& cfg);
// "10.0.0.7", "::1" or the socket path, for messages.
[[nodiscard]] std::string describe_address(const UpstreamAddress& address);

}  // namespace l5pg::daemon
