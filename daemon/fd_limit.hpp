// The open-file limit l5pgd's sessions need.
#pragma once

#include <algorithm>
#include <cstdint>

#include "config/config.hpp"

namespace l5pg::daemon {

// RDMA channels of closed sessions kept until the client acknowledged their last writes
// (Worker::linger): each holds its two descriptors, a mailbox slot and its memory for up to
// rdma.completion_timeout_ms, outside every session count. Each worker may keep this many, a
// quarter of limits.max_sessions shared out (at least one each): a client that made every
// session it closes linger would otherwise hold them without bound.
[[nodiscard]] inline uint32_t lingering_share(const config::Config& config) noexcept {
    const uint32_t workers = std::max(1u, config.workers.count);
    return std::max<uint32_t>(1, config.limits.max_sessions / 4 / workers);
}

// Every session holds two descriptors (client and upstream sockets), and a connection before
// its StartupMessage one (at most limits.max_startup_sessions of those, beside the sessions:
// they take no place of limits.max_sessions), a lingering RDMA channel two; the soft limit a shell
// hands down is often 1,024. Raises it to the hard limit, and warns when even that is too low for
// `limits`: clients are then refused for want of descriptors. Called at start and on every reload.
void raise_fd_limit(const config::Config& config);

}  // namespace l5pg::daemon
