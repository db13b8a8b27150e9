// The libc functions the shim wraps, resolved with dlsym(RTLD_NEXT). Resolved once when
// the library is loaded (dlsym is not async-signal-safe), and lazily as a fallback for
// calls made by other libraries' constructors before ours ran.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

namespace l5pg::shim {

struct RealCalls {
    int (*connect)(int, const sockaddr*, socklen_t);
    int (*close)(int);
    int (*close_range)(unsigned, unsigned, int);  // glibc >= 2.34, else the system call
    void (*closefrom)(int);                       // glibc >= 2.34, else by close_range
    ssize_t (*send)(int, const void*, size_t, int);
    ssize_t (*sendto)(int, const void*, size_t, int, const sockaddr*, socklen_t);
    ssize_t (*sendmsg)(int, const msghdr*, int);
    ssize_t (*write)(int, const void*, size_t);
    ssize_t (*writev)(int, const iovec*, int);
    ssize_t (*recv)(int, void*, size_t, int);
    ssize_t (*recvfrom)(int, void*, size_t, int, sockaddr*, socklen_t*);
    ssize_t (*recvmsg)(int, msghdr*, int);
    ssize_t (*read)(int, void*, size_t);
    ssize_t (*readv)(int, const iovec*, int);
    int (*poll)(pollfd*, nfds_t, int);
    int (*ppoll)(pollfd*, nfds_t, const timespec*, const sigset_t*);
    int (*select)(int, fd_set*, fd_set*, fd_set*, timeval*);
    int (*pselect)(int, fd_set*, fd_set*, fd_set*, const timespec*, const sigset_t*);
    int (*dup)(int);
    int (*dup2)(int, int);
    int (*dup3)(int, int, int);
    int (*fcntl)(int, int, ...);
    int (*fcntl64)(int, int, ...);
    int (*ioctl)(int, unsigned long, ...);
    int (*epoll_ctl)(int, int, int, epoll_event*);
    pid_t (*fork_without_handlers)();  // _Fork(): glibc >= 2.34
};

// Never null after resolve_real_calls(); a symbol missing from libc aborts at load time
// with a message, since continuing would crash later in a stranger place.
const RealCalls& real();
void resolve_real_calls();

}  // namespace l5pg::shim
