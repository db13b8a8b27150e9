#include "daemon/shutdown_cancels.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "daemon/unique_fd.hpp"
#include "protocol/startup.hpp"
#include "transport/wait/deadline.hpp"

namespace l5pg::daemon {
namespace {

struct Pending {
    UniqueFd fd;
    protocol::CancelKey key;
    bool sent = false;
};

// A non-blocking connection on its way (or there already); an invalid fd when it failed.
UniqueFd start_connect(const UpstreamAddress& address) {
    UniqueFd fd(::socket(address.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid())
        return fd;
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address.storage), address.length) !=
            0 &&
        errno != EINPROGRESS)
        fd.reset();  // EAGAIN: a Unix socket's backlog is full
    return fd;
}

// Once connected (writable): the 16 bytes fit any empty socket buffer whole.
bool send_request(Pending& p) {
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(p.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0)
        return false;
    const auto request = protocol::build_cancel_request(p.key);
    return ::send(p.fd.get(), request.data(), request.size(), MSG_DONTWAIT | MSG_NOSIGNAL) ==
           static_cast<ssize_t>(request.size());
}

}  // namespace

size_t ShutdownCancels::send(std::chrono::milliseconds budget) {
    const wait::Deadline deadline = wait::Deadline::after(budget);
    std::vector<Pending> pending;
    for (const CancelKeys::Backend& backend : backends_) {
        if (backend.address.length == 0)
            continue;
        if (UniqueFd fd = start_connect(backend.address); fd.valid())
            pending.push_back({std::move(fd), backend.key});
    }
    size_t sent = 0;
    while (!pending.empty() && !deadline.passed()) {
        std::vector<pollfd> fds;
        for (const Pending& p : pending)
            fds.push_back({p.fd.get(), POLLOUT, 0});
        if (::poll(fds.data(), fds.size(), deadline.poll_ms()) < 0 && errno != EINTR)
            break;
        std::vector<Pending> waiting;
        for (size_t i = 0; i < pending.size(); ++i) {
            if (fds[i].revents == 0)
                waiting.push_back(std::move(pending[i]));
            else if (send_request(pending[i]))
                ++sent;
        }
        pending = std::move(waiting);
    }
    backends_.clear();
    return sent;
}

}  // namespace l5pg::daemon
