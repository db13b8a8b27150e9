// Descriptors a client passed l5pgd (SCM_RIGHTS on its Unix socket) that l5pgd does not keep:
// all but the memfd of a shared-memory upgrade; and the Unix client sockets themselves once
// their sessions end (or are refused at accept for a limit; not those refused for want of
// descriptors, which must free theirs at once: fd_reserve.hpp), whose close drops what is still
// queued in them. Closing one may block for as long as the client likes
// (transport/wait/passed_fds.hpp: a lingering socket), and a worker, or the acceptor, that did it
// would stall everything it serves. One thread closes them for all; a socket is reset rather than
// left to linger (SO_LINGER 0), and a Unix socket is shut down and emptied first, the descriptors
// queued in it closed the same way. A file on a FUSE mount still holds that thread up: close() asks
// its server to flush, and one that never answers keeps what is queued behind it open (l5pgd then
// runs out of descriptors: new clients get 53300, its sessions go on). Never a worker.
//
// The thread is detached and owns the queue with this object: a close that never returns
// must not keep l5pgd from exiting either (the kernel drops an exiting process's files
// without waiting).
#pragma once

#include <cstddef>
#include <memory>

#include "daemon/unique_fd.hpp"
#include "transport/wait/passed_fds.hpp"

namespace l5pg::daemon {

class ForeignFds {
  public:
    // The most descriptors the closing thread holds at once, emptying nested sockets.
    static constexpr size_t kMostHeld = 64 + wait::PassedFds::kMax;

    ForeignFds();
    ~ForeignFds();
    ForeignFds(const ForeignFds&) = delete;
    ForeignFds& operator=(const ForeignFds&) = delete;

    // Closes them on the closing thread. Never blocks (but for the queue's lock).
    void close_later(UniqueFd fd) noexcept;
    // Takes all of `passed`, leaving it empty.
    void close_later(wait::PassedFds& passed) noexcept;

  private:
    struct Queue;
    static void run(const std::shared_ptr<Queue>& queue);  // the closing thread
    std::shared_ptr<Queue> queue_;
};

}  // namespace l5pg::daemon
