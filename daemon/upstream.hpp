// Connecting to the upstream Postgres: its Unix socket, or TCP when upstream.host is set.
#pragma once

#include <string>

#include "config/config.hpp"
#include "daemon/unique_fd.hpp"

namespace l5pg::daemon {

struct UpstreamConnect {
    UniqueFd fd;               // non-blocking; valid unless failed
    bool in_progress = false;  // TCP connect still pending: wait for writability
    int error = 0;             // errno of an immediate failure
    // Why upstream.host could not be looked up (getaddrinfo's words), if that failed.
    const char* lookup_failure = nullptr;
};

// Starts a non-blocking connect. Unix sockets complete (or fail) immediately.
[[nodiscard]] UpstreamConnect start_upstream_connect(const config::UpstreamConfig& cfg);

// For a pending connect that became writable: 0 on success, else the errno (SO_ERROR).
[[nodiscard]] int finish_upstream_connect(int fd) noexcept;

// "/var/run/postgresql/.s.PGSQL.5432" or "host:port", for messages.
[[nodiscard]] std::string describe_upstream(const config::UpstreamConfig& cfg);

}  // namespace l5pg::daemon
