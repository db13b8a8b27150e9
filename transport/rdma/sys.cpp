#include "transport/rdma/sys.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

namespace l5pg::rdma::sys {

static_assert(sizeof(unsigned long) >= sizeof(pthread_t));

ssize_t send_raw(int fd, const void* buf, size_t len, int flags) noexcept {
    return ::syscall(SYS_sendto, fd, buf, len, flags, nullptr, 0);
}

ssize_t recv_raw(int fd, void* buf, size_t len, int flags) noexcept {
    return ::syscall(SYS_recvfrom, fd, buf, len, flags, nullptr, nullptr);
}

int epoll_ctl_raw(int epfd, int op, int fd, epoll_event* event) noexcept {
    return static_cast<int>(::syscall(SYS_epoll_ctl, epfd, op, fd, event));
}

int epoll_wait_raw(int epfd, epoll_event* events, int max, int timeout_ms) noexcept {
    return static_cast<int>(
        ::syscall(SYS_epoll_pwait, epfd, events, max, timeout_ms, nullptr, size_t{8}));
}

bool set_nonblocking(int fd) noexcept {
    const int flags = ::fcntl(fd, F_GETFL);
    return flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

std::string errno_text(const char* what, int err) {
    return std::string(what) + ": " + std::strerror(err);
}

bool Thread::start(std::function<void()> body, std::string& error) {
    if (running_) {
        error = "thread already running";
        return false;
    }
    body_ = std::move(body);
    sigset_t all;
    sigset_t old;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &old);  // the new thread inherits this mask
    pthread_t t;
    const int rc = ::pthread_create(&t, nullptr, &Thread::trampoline, this);
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (rc != 0) {
        error = errno_text("pthread_create", rc);
        return false;
    }
    handle_ = static_cast<unsigned long>(t);
    running_ = true;
    return true;
}

void Thread::join() noexcept {
    if (!running_)
        return;
    ::pthread_join(static_cast<pthread_t>(handle_), nullptr);
    running_ = false;
}

void* Thread::trampoline(void* self) noexcept {
    static_cast<Thread*>(self)->body_();
    return nullptr;
}

}  // namespace l5pg::rdma::sys
