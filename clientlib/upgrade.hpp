// Deciding which connections to upgrade, and the upgrade handshake with l5pgd.
#pragma once

#include <sys/socket.h>

#include <cstddef>

#include "clientlib/channel.hpp"

namespace l5pg::shim {

// True when `addr` is an AF_UNIX path whose marker file "<path>.l5pg", written by l5pgd,
// names this socket's inode. Async-signal-safe (runs on libpq's cancel path).
[[nodiscard]] bool is_l5pgd_socket(const sockaddr* addr, socklen_t len);

// True when `addr` is an AF_INET/AF_INET6 address whose port is listed in L5PG_RDMA_PORTS
// and L5PG_TRANSPORT=rdma. Async-signal-safe.
[[nodiscard]] bool is_rdma_upgrade_target(const sockaddr* addr, socklen_t len);

enum class UpgradeResult {
    Upgraded,  // `channel` is set; the first bytes still have to be sent through it
    Plain,     // not upgraded: carry on over the socket
    Failed,    // the connection is unusable (errno set): the handshake broke midway
};

// Called with the first bytes the application sends on a candidate fd. Cancel requests
// and anything that is not a startup packet stay plain (async-signal-safe on that path).
[[nodiscard]] UpgradeResult try_upgrade(int fd, const std::byte* first, size_t len,
                                        Channel*& channel);
// The same for an RDMA candidate (docs/wire-format.md section 5): a declined or impossible
// upgrade leaves the connection on TCP; a peer that is not l5pgd (it answers with an
// ErrorResponse) makes the connection unusable (Failed), which is why only the ports the
// user listed are ever tried.
[[nodiscard]] UpgradeResult try_upgrade_rdma(int fd, const std::byte* first, size_t len,
                                             Channel*& channel);
// In a forked child: forget the parent's RDMA device (never touched again).
void rdma_forget_after_fork();

}  // namespace l5pg::shim
