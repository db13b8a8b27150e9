// One place Postgres may listen: a Unix socket, or one of upstream.host's addresses.
#pragma once

#include <sys/socket.h>

#include <string>

namespace l5pg::daemon {

struct UpstreamAddress {
    sockaddr_storage storage{};
    socklen_t length = 0;

    // The address's bytes, to compare and keep in sets (the storage beyond `length` is zero).
    [[nodiscard]] std::string bytes() const {
        return {reinterpret_cast<const char*>(&storage), static_cast<size_t>(length)};
    }
};

}  // namespace l5pg::daemon
