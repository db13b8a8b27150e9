#include "daemon/foreign_fds.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/thread_name.hpp"

namespace l5pg::daemon {

struct ForeignFds::Queue {
    std::mutex mutex;
    std::condition_variable wake;
    std::vector<int> fds;  // guarded by mutex
    bool stop = false;     // guarded by mutex: the owner is gone, close what is left and end
};

namespace {

// How a descriptor is emptied before its close. Closing a Unix socket drops what is queued
// in it, and descriptors passed in it would have their last close on this thread, unreset:
// those are taken out first and closed the same way. shutdown() first, so that nobody can
// add more (a send gets EPIPE, a connect ECONNREFUSED) and the queue ends.
enum class Emptying {
    Nothing,     // not a Unix socket (a socket is reset at its close, SO_LINGER 0)
    Stream,      // read until the end (0)
    Datagrams,   // read until none is left (EAGAIN): a datagram may have no bytes
    SeqPackets,  // read while a message comes (SO_PASSCRED marks each): the end reads 0 too
    Listener,    // accept the connections waiting, then empty those
};

Emptying prepare(int fd) noexcept {
    int domain = 0;
    socklen_t len = sizeof domain;
    // getsockopt() fails at once on anything but a socket (ENOTSOCK), a FUSE file included.
    if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0)
        return Emptying::Nothing;
    const linger reset{1, 0};
    (void)::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    if (domain != AF_UNIX)
        return Emptying::Nothing;
    int listening = 0;
    int type = 0;
    len = sizeof listening;
    (void)::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len);
    len = sizeof type;
    (void)::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len);
    (void)::shutdown(fd, SHUT_RDWR);
    if (listening != 0) {
        // accept() waits or not as the listener's file says, whatever its flags.
        (void)::fcntl(fd, F_SETFL, O_NONBLOCK);
        return Emptying::Listener;
    }
    if (type == SOCK_SEQPACKET) {
        const int on = 1;
        (void)::setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &on, sizeof on);
        return Emptying::SeqPackets;
    }
    return type == SOCK_DGRAM ? Emptying::Datagrams : Emptying::Stream;
}

// Takes the next message's descriptors (or the next waiting connection) out of `fd` into
// `taken`; false once there is nothing left to take.
bool take_next(int fd, Emptying how, wait::PassedFds& taken) noexcept {
    if (how == Emptying::Nothing)
        return false;
    if (how == Emptying::Listener) {
        const int accepted = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (accepted >= 0)
            taken.fds[taken.count++] = accepted;
        return accepted >= 0 || errno == EINTR || errno == ECONNABORTED;
    }
    std::array<std::byte, 4096> sink;
    bool message = false;
    const ssize_t n =
        wait::recv_message_taking_fds(fd, sink.data(), sink.size(), MSG_DONTWAIT, taken, message);
    if (n < 0)
        return errno == EINTR;
    switch (how) {
        case Emptying::Stream:
            return n > 0 || taken.count > 0;
        case Emptying::SeqPackets:
            return message;
        default:
            return true;
    }
}

// Closes `first` and, depth first, whatever was queued in it: a socket's descriptors are
// closed before the next message of the socket is read, so l5pgd's descriptor table holds
// one message's worth (at most 253) per level of nesting, not a whole queue's. (Should it
// fill up nonetheless, the kernel closes what it had no room for, here.)
void close_foreign(int first) noexcept {
    struct Open {
        int fd;
        Emptying how;
    };
    std::vector<Open> open{{first, prepare(first)}};
    while (!open.empty()) {
        const Open top = open.back();
        wait::PassedFds taken;
        if (take_next(top.fd, top.how, taken)) {
            for (size_t i = 0; i < taken.count; ++i)
                open.push_back({taken.fds[i], prepare(taken.fds[i])});
            continue;
        }
        (void)::close(top.fd);
        open.pop_back();
    }
}

}  // namespace

void ForeignFds::run(const std::shared_ptr<Queue>& queue) {
    name_this_thread("l5pgd-fd-closer");
    std::unique_lock lock(queue->mutex);
    for (;;) {
        queue->wake.wait(lock, [&] { return queue->stop || !queue->fds.empty(); });
        if (queue->fds.empty())
            return;  // stopping, nothing left
        std::vector<int> batch;
        batch.swap(queue->fds);
        lock.unlock();
        for (const int fd : batch)
            close_foreign(fd);
        lock.lock();
    }
}

ForeignFds::ForeignFds() : queue_(std::make_shared<Queue>()) {
    std::thread([queue = queue_] { run(queue); }).detach();
}

ForeignFds::~ForeignFds() {
    {
        const std::lock_guard lock(queue_->mutex);
        queue_->stop = true;
    }
    queue_->wake.notify_one();
}

void ForeignFds::close_later(UniqueFd fd) noexcept {
    if (!fd.valid())
        return;
    {
        const std::lock_guard lock(queue_->mutex);
        queue_->fds.push_back(fd.release());
    }
    queue_->wake.notify_one();
}

void ForeignFds::close_later(wait::PassedFds& passed) noexcept {
    if (passed.count == 0)
        return;
    {
        const std::lock_guard lock(queue_->mutex);
        queue_->fds.insert(queue_->fds.end(), passed.fds.begin(),
                           passed.fds.begin() + passed.count);
    }
    passed.count = 0;
    queue_->wake.notify_one();
}

}  // namespace l5pg::daemon
