// Who is on the other end of an accepted client socket: the kernel's credentials for a
// Unix socket (SO_PEERCRED: they cannot be forged by the client) or the TCP address.
#pragma once

#include <sys/types.h>

#include <string>

namespace l5pg::daemon {

struct PeerIdentity {
    bool local = false;  // Unix socket: uid, gid and pid are valid
    uid_t uid = 0;
    gid_t gid = 0;
    pid_t pid = 0;
    std::string address;  // TCP: "ip" (no port)
    uint16_t tcp_port = 0;

    // The key per-peer limits count by: "uid 1000" or "127.0.0.1".
    [[nodiscard]] std::string limit_key() const;
    // For log lines: "uid 1000 pid 4242" or "127.0.0.1:51234".
    [[nodiscard]] std::string describe() const;
};

// Reads the identity of the client connected on `fd`; an unidentifiable peer (a failed
// getsockopt/getpeername) yields uid -1 / address "?", which no rule matches.
[[nodiscard]] PeerIdentity identify_peer(int fd, bool unix_socket);

// The OS user name of `uid`, or "" when it has none (a deleted account).
[[nodiscard]] std::string os_user_name(uid_t uid);

}  // namespace l5pg::daemon
