// After TLS began on a connection that will not be upgraded, the socket is in a state
// libpq does not expect (it would send its startup packet into l5pgd's TLS session).
// The shim then replaces it with a fresh TCP connection to the same address, under the
// same descriptor number, with libpq's socket options and flags, so that libpq carries on
// exactly as without the shim. The old connection is closed; l5pgd sees a client that
// left during startup.
#pragma once

namespace l5pg::shim {

// False with errno set if the new connection cannot be made (fd is then left as it was).
[[nodiscard]] bool reconnect_plain(int fd);

}  // namespace l5pg::shim
