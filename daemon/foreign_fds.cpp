#include "daemon/foreign_fds.hpp"

#include <sys/socket.h>
#include <unistd.h>

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
    size_t closing = 0;    // guarded by mutex: taken by the thread, not closed yet
    bool stop = false;     // guarded by mutex: the owner is gone, close what is left and end
};

namespace {

// A socket is reset at its close instead of waiting out a linger time (or sending what its
// maker left in it); getsockopt() fails at once on anything else (ENOTSOCK), a file on a
// FUSE mount included.
void close_foreign(int fd) noexcept {
    int type = 0;
    socklen_t len = sizeof type;
    if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0) {
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
        queue->closing = batch.size();
        lock.unlock();
        for (const int fd : batch)
            close_foreign(fd);
        lock.lock();
        queue->closing = 0;
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

size_t ForeignFds::pending() const noexcept {
    const std::lock_guard lock(queue_->mutex);
    return queue_->fds.size() + queue_->closing;
}

}  // namespace l5pg::daemon
