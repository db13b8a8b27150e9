// limits.max_sessions across the workers. As Postgres takes a max_connections slot only
// once a client's startup packet is in, a session takes a place at its StartupMessage (or at
// an upgrade request before it: the rings or the RDMA channel are what the cap bounds), and
// holds it until it closes or is refused. Connections before that (idle, in their TLS
// handshake, CancelRequests) take none: the startup caps bound them, and they keep no one
// out. A StartupMessage that finds every place taken gets FATAL 53300, after the TLS
// negotiation (refused at accept, libpq 17.1, 16.5, 15.9, 14.14 and later would show only
// "server sent an error response during SSL exchange", and a full l5pgd would forward no
// cancel). Thread-safe: workers take places, sessions give them back.
#pragma once

#include "daemon/capacity.hpp"

namespace l5pg::daemon {

// Places of one each, up to limits.max_sessions.
using SessionCap = Capacity;

}  // namespace l5pg::daemon
