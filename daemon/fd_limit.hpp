// The open-file limit l5pgd's sessions need.
#pragma once

#include "config/config.hpp"

namespace l5pg::daemon {

// Every session holds two descriptors (client and upstream sockets), and a connection before
// its StartupMessage one (at most limits.max_startup_sessions of those, beside the sessions:
// they take no place of limits.max_sessions); the soft limit a shell hands down is often 1,024.
// Raises it to the hard limit, and warns when even that is too low for `limits`: clients are
// then refused for want of descriptors. Called at start and on every reload.
void raise_fd_limit(const config::LimitsConfig& limits);

}  // namespace l5pg::daemon
