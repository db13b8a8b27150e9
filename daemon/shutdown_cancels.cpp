#include "daemon/shutdown_cancels.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "daemon/unique_fd.hpp"
#include "protocol/startup.hpp"
#include "transport/wait/deadline.hpp"

namespace l5pg::daemon {
namespace {

struct Pending {
    UniqueFd fd;
    protocol::CancelKey key;
};

// How often a connection refused for a full backlog is tried again within the budget.
constexpr int kRetryMs = 10;

// A non-blocking connection on its way (or there already); an invalid fd when it failed,
// `busy` when only because a Unix socket's listen backlog is full (EAGAIN: worth another try,
// a postmaster busy forking takes from it).
UniqueFd start_connect(const UpstreamAddress& address, bool& busy) {
    busy = false;
    UniqueFd fd(::socket(address.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid())
        return fd;
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address.storage), address.length) !=
            0 &&
        errno != EINPROGRESS) {
        busy = errno == EAGAIN;
        fd.reset();
    }
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

// Starts a connection for each of `backends`; those refused for a full backlog stay there.
void connect_all(std::vector<CancelKeys::Backend>& backends, std::vector<Pending>& pending) {
    std::vector<CancelKeys::Backend> busy_ones;
    for (const CancelKeys::Backend& backend : backends) {
        if (backend.address.length == 0)
            continue;
        bool busy = false;
        if (UniqueFd fd = start_connect(backend.address, busy); fd.valid())
            pending.push_back({std::move(fd), backend.key});
        else if (busy)
            busy_ones.push_back(backend);
    }
    backends = std::move(busy_ones);
}

}  // namespace

size_t ShutdownCancels::send(std::chrono::milliseconds budget) {
    const wait::Deadline deadline = wait::Deadline::after(budget);
    std::vector<Pending> pending;
    size_t sent = 0;
    connect_all(backends_, pending);
    while ((!pending.empty() || !backends_.empty()) && !deadline.passed()) {
        std::vector<pollfd> fds;
        for (const Pending& p : pending)
            fds.push_back({p.fd.get(), POLLOUT, 0});
        const int wait_ms =
            backends_.empty() ? deadline.poll_ms() : std::min(deadline.poll_ms(), kRetryMs);
        if (::poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR)
            break;
        std::vector<Pending> waiting;
        for (size_t i = 0; i < pending.size(); ++i) {
            if (fds[i].revents == 0)
                waiting.push_back(std::move(pending[i]));
            else if (send_request(pending[i]))
                ++sent;
        }
        pending = std::move(waiting);
        // Not in the last moments: a connection the postmaster forks for, never used.
        if (deadline.poll_ms() > 2 * kRetryMs)
            connect_all(backends_, pending);
    }
    backends_.clear();
    return sent;
}

}  // namespace l5pg::daemon
