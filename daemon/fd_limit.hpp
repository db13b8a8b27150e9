// The open-file limit l5pgd's sessions need.
#pragma once

namespace l5pg::daemon {

// Every session holds two descriptors (client and upstream sockets); the soft limit a shell
// hands down is often 1,024. Raises it to the hard limit, and warns when even that is too
// low for `max_sessions` (limits.max_sessions): clients are then refused for want of
// descriptors. Called at start and on every reload.
void raise_fd_limit(unsigned max_sessions);

}  // namespace l5pg::daemon
