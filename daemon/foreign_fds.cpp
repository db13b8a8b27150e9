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

// Options of a passed socket (set by whoever made it) that would put control messages of
// their own before the descriptors, leaving less room for them: off.
void stop_extra_control_messages(int fd) noexcept {
    const int off = 0;
    for (const int option :
         {SO_TIMESTAMP, SO_TIMESTAMPNS, SO_TIMESTAMPING, SO_RXQ_OVFL, SO_PASSSEC, SO_PASSPIDFD})
        (void)::setsockopt(fd, SOL_SOCKET, option, &off, sizeof off);
}

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
    // Before looking at what it is: it cannot become a listener after this.
    (void)::shutdown(fd, SHUT_RDWR);
    int listening = 0;
    int type = 0;
    len = sizeof listening;
    (void)::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len);
    len = sizeof type;
    (void)::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len);
    if (listening != 0) {
        // accept() waits or not as the listener's file says, whatever its flags.
        (void)::fcntl(fd, F_SETFL, O_NONBLOCK);
        return Emptying::Listener;
    }
    stop_extra_control_messages(fd);
    const int on = 1;
    if (type == SOCK_SEQPACKET) {
        (void)::setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &on, sizeof on);
        return Emptying::SeqPackets;
    }
    if (type == SOCK_DGRAM)
        return Emptying::Datagrams;
    wait::read_out_of_band_inline(fd);
    return Emptying::Stream;
}

// A descriptor being closed: a Unix socket stays open while its queue is emptied.
struct Closing {
    int fd;
    Emptying how;
    unsigned errors = 0;  // reads in a row that failed with a pending socket error
};

// A datagram or sequenced-packet socket reports a pending error (its peer went away with
// bytes unread: ECONNRESET) before what is queued; reading it clears it. A peer that keeps
// setting one again (reconnecting) gets this many reads at most.
constexpr unsigned kMaxErrorsInARow = 16;

// Takes the next message's descriptors (or the next waiting connection) out of `c` into
// `taken`; false once there is nothing left to take.
bool take_next(Closing& c, wait::PassedFds& taken) noexcept {
    if (c.how == Emptying::Nothing)
        return false;
    if (c.how == Emptying::Listener) {
        const int accepted = ::accept4(c.fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (accepted >= 0)
            taken.fds[taken.count++] = accepted;
        return accepted >= 0 || errno == EINTR;
    }
    std::array<std::byte, 4096> sink;
    bool message = false;
    const ssize_t n =
        wait::recv_message_taking_fds(c.fd, sink.data(), sink.size(), MSG_DONTWAIT, taken, message);
    if (n < 0) {
        if (errno == EINTR)
            return true;
        const bool pending_error = errno != EAGAIN && errno != EBADF && errno != EINVAL &&
                                   errno != ENOTCONN && c.how != Emptying::Stream;
        return pending_error && ++c.errors < kMaxErrorsInARow;
    }
    c.errors = 0;
    switch (c.how) {
        case Emptying::Stream:
            return n > 0 || taken.count > 0;
        case Emptying::SeqPackets:
            return message;
        default:
            return true;
    }
}

// How many Unix sockets the closing thread holds open while it empties nested ones. A client
// can nest sockets as deep as its own open-file limit allows (and keep adding levels ahead of
// us); no honest client nests any. Beyond this, a socket is closed without being emptied,
// which may hold this thread up (the risk emptying avoids) but keeps the thread's share of
// l5pgd's descriptor table at ForeignFds::kMostHeld (counted in fd_limit.cpp).
constexpr size_t kMaxHeldOpen = ForeignFds::kMostHeld - wait::PassedFds::kMax;

// Closes `first` and, depth first, whatever was queued in it: a socket's descriptors are
// closed before the next message of the socket is read, so l5pgd's descriptor table holds
// one message's worth (at most 253) per level of nesting, not a whole queue's; and only
// Unix sockets wait there, anything else is closed (reset) as it comes.
void close_foreign(int first) noexcept {
    std::vector<Closing> open{{first, prepare(first)}};
    while (!open.empty()) {
        wait::PassedFds taken;
        if (take_next(open.back(), taken)) {
            for (size_t i = 0; i < taken.count; ++i) {
                const Emptying how = prepare(taken.fds[i]);
                if (how == Emptying::Nothing || open.size() >= kMaxHeldOpen)
                    (void)::close(taken.fds[i]);
                else
                    open.push_back({taken.fds[i], how});
            }
            continue;
        }
        (void)::close(open.back().fd);
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
