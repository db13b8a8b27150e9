#include "daemon/foreign_fds.hpp"

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

// Closing a Unix socket drops what is queued in it, and descriptors passed in it would have
// their last close here, unreset: they are taken out first (after shutdown(), nobody can add
// more, so the queue ends) and closed the same way (`more`).
void take_queued_fds(int fd, std::vector<int>& more) noexcept {
    (void)::shutdown(fd, SHUT_RDWR);
    std::array<std::byte, 4096> sink;
    for (;;) {
        wait::PassedFds passed;
        const ssize_t n = wait::recv_taking_fds(fd, sink.data(), sink.size(), MSG_DONTWAIT, passed);
        more.insert(more.end(), passed.fds.begin(), passed.fds.begin() + passed.count);
        if (n <= 0 && !(n < 0 && errno == EINTR))
            return;
    }
}

// A socket is reset at its close instead of waiting out a linger time (or sending what its
// maker left in it), a Unix one emptied first; getsockopt() fails at once on anything else
// (ENOTSOCK), a file on a FUSE mount included.
void close_foreign(int fd, std::vector<int>& more) noexcept {
    int domain = 0;
    socklen_t len = sizeof domain;
    if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0) {
        if (domain == AF_UNIX)
            take_queued_fds(fd, more);
        const linger reset{1, 0};
        (void)::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    }
    (void)::close(fd);
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
        while (!batch.empty()) {
            const int fd = batch.back();
            batch.pop_back();
            close_foreign(fd, batch);
        }
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
