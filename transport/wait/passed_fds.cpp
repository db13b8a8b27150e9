#include "transport/wait/passed_fds.hpp"

#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>

namespace l5pg::wait {

namespace {

// Appends the descriptors of an SCM_RIGHTS message to `passed`.
void take_rights(const cmsghdr& c, PassedFds& passed) noexcept {
    const size_t count = (c.cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(&c) + i * sizeof(int), sizeof fd);
        if (passed.count < PassedFds::kMax)
            passed.fds[passed.count++] = fd;
        else
            (void)::close(fd);  // never when `passed` came empty (see the header)
    }
}

ssize_t recv_with_control(int sock, void* buf, size_t len, int flags, PassedFds& passed,
                          bool* credentials) noexcept {
    // Room for the most descriptors one message carries, credentials, and control messages
    // a socket's options may add before them (timestamps), which would cost descriptors.
    alignas(cmsghdr) char
        control[CMSG_SPACE(sizeof(int) * PassedFds::kMax) + CMSG_SPACE(sizeof(ucred)) + 256];
    iovec iov{buf, len};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    // The raw system call: this code is also linked into the LD_PRELOAD shim, whose own
    // wrappers must not see it.
    const ssize_t n = ::syscall(SYS_recvmsg, sock, &msg, flags | MSG_CMSG_CLOEXEC);
    if (n < 0)
        return n;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET)
            continue;
        if (c->cmsg_type == SCM_RIGHTS) {
            take_rights(*c, passed);
        } else if (c->cmsg_type == SCM_PIDFD && c->cmsg_len >= CMSG_LEN(sizeof(int))) {
            int pidfd;  // a descriptor of our own now: never kept (closing one never blocks)
            std::memcpy(&pidfd, CMSG_DATA(c), sizeof pidfd);
            (void)::close(pidfd);
        } else if (c->cmsg_type == SCM_CREDENTIALS && credentials != nullptr)
            *credentials = true;
    }
    return n;
}

}  // namespace

void read_out_of_band_inline(int sock) noexcept {
    const int on = 1;
    (void)::setsockopt(sock, SOL_SOCKET, SO_OOBINLINE, &on, sizeof on);
}

ssize_t recv_taking_fds(int sock, void* buf, size_t len, int flags, PassedFds& passed) noexcept {
    return recv_with_control(sock, buf, len, flags, passed, nullptr);
}

ssize_t recv_message_taking_fds(int sock, void* buf, size_t len, int flags, PassedFds& passed,
                                bool& message) noexcept {
    message = false;
    return recv_with_control(sock, buf, len, flags, passed, &message);
}

}  // namespace l5pg::wait
