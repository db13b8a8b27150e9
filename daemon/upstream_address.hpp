// One place Postgres may listen: a Unix socket, or one of upstream.host's addresses.
#pragma once

#include <sys/socket.h>

namespace l5pg::daemon {

struct UpstreamAddress {
    sockaddr_storage storage{};
    socklen_t length = 0;
};

}  // namespace l5pg::daemon
