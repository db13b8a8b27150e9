// The open-file limit l5pgd's sessions need.
#pragma once

#include <algorithm>
#include <cstdint>

#include "config/config.hpp"

namespace l5pg::daemon {

// RDMA channels of closed sessions kept until the client acknowledged their last writes
// (Worker::linger): each holds its two descriptors, a mailbox slot and its memory for up to
// rdma.completion_timeout_ms, outside every session count. At most a quarter of
// limits.max_sessions of them, all workers together: a client that made every session
// it closes linger would otherwise hold them without bound.
[[nodiscard]] inline uint32_t max_lingering_channels(const config::LimitsConfig& limits) noexcept {
    return std::max<uint32_t>(1, limits.max_sessions / 4);
}

// Every session holds two descriptors (client and upstream sockets), and a connection before
// its StartupMessage one (at most limits.max_startup_sessions of those, beside the sessions:
// they take no place of limits.max_sessions), a lingering RDMA channel two; the soft limit a shell
// hands down is often 1,024. Raises it to the hard limit, and warns when even that is too low for
// `limits`: clients are then refused for want of descriptors. Called at start and on every reload.
void raise_fd_limit(const config::LimitsConfig& limits);

}  // namespace l5pg::daemon
