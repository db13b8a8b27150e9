// epoll_ctl: watched to learn that the application waits in epoll (see foreign_waiters.hpp);
// the call goes to libc unchanged but for one case, edge-triggered writers (below).
#include <sys/epoll.h>

#include <cerrno>

#include "clientlib/c_boundary.hpp"
#include "clientlib/fd_table.hpp"
#include "clientlib/foreign_waiters.hpp"
#include "clientlib/real_calls.hpp"

namespace l5pg::shim {
namespace {

// An edge-triggered registration of one of our sockets for writing alone would never wake:
// l5pgd's doorbell for room made in a full ring makes the socket readable, and the kernel
// passes a registration only the wake-ups whose events it asked for (the socket itself stays
// writable: no EPOLLOUT wake-up comes). With EPOLLIN in the registration the doorbell wakes it,
// and the event reports the socket's whole state, EPOLLOUT included. The loop also sees an
// EPOLLIN it did not ask for; event loops dispatch by the events they registered (libevent,
// Python's selectors), so it only costs them a look.
bool waits_for_room_unseen(int op, int fd, const epoll_event* event) {
    if ((op != EPOLL_CTL_ADD && op != EPOLL_CTL_MOD) || event == nullptr)
        return false;
    const uint32_t events = event->events;
    if ((events & EPOLLET) == 0 || (events & EPOLLOUT) == 0 || (events & EPOLLIN) != 0)
        return false;
    const FdKind kind = fd_lookup(fd).kind;
    return kind == FdKind::Candidate || kind == FdKind::Upgrading || kind == FdKind::Upgraded;
}

}  // namespace
}  // namespace l5pg::shim

extern "C" int epoll_ctl(int epfd, int op, int fd, epoll_event* event) {
    return l5pg::shim::within_c_boundary([&] {
        const int saved = errno;
        l5pg::shim::note_epoll_ctl(op, fd);
        errno = saved;
        if (l5pg::shim::waits_for_room_unseen(op, fd, event)) {
            epoll_event with_doorbell = *event;
            with_doorbell.events |= EPOLLIN;
            return l5pg::shim::real().epoll_ctl(epfd, op, fd, &with_doorbell);
        }
        return l5pg::shim::real().epoll_ctl(epfd, op, fd, event);
    });
}
