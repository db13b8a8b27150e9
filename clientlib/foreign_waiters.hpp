// Whether the application may wait for an upgraded fd somewhere the shim cannot see.
//
// poll/ppoll/select/pselect are interposed: they look at the rings and arm the wake-up
// flags themselves just before blocking. An epoll set (asyncio, psycopg 3, libuv) only
// sees the socket, so for it every call that returns to the application must leave the
// readiness invariant of channel.hpp in place, which costs l5pgd a doorbell byte per
// response. We pay that only once the process has registered a socket that may be ours
// in an epoll set (epoll_ctl is interposed for this); libpq programs such as psql and
// pgbench never do. An event loop may also register sockets through io_uring
// (IORING_OP_EPOLL_CTL: libuv 1.45 and later, so Node.js and uvloop), which no interposer
// sees: a process with an io_uring instance open when a connection is upgraded counts too.
#pragma once

#include <sys/epoll.h>

namespace l5pg::shim {

[[nodiscard]] bool foreign_waiters_possible();
// The epoll_ctl() interposer's hook: called before the real call.
void note_epoll_ctl(int op, int fd);
// Before an upgrade: looks for an io_uring instance among the process's descriptors
// (/proc/self/fd; async-signal-safe, no allocation).
void note_io_uring_instances();

}  // namespace l5pg::shim
