// epoll_ctl: watched only to learn that the application waits in epoll (see
// foreign_waiters.hpp); the call itself goes to libc unchanged.
#include <sys/epoll.h>

#include <cerrno>

#include "clientlib/c_boundary.hpp"
#include "clientlib/foreign_waiters.hpp"
#include "clientlib/real_calls.hpp"

extern "C" int epoll_ctl(int epfd, int op, int fd, epoll_event* event) {
    return l5pg::shim::within_c_boundary([&] {
        const int saved = errno;
        l5pg::shim::note_epoll_ctl(op, fd);
        errno = saved;
        return l5pg::shim::real().epoll_ctl(epfd, op, fd, event);
    });
}
