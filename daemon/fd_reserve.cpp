#include "daemon/fd_reserve.hpp"

#include <fcntl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

namespace l5pg::daemon {

size_t FdReserve::refuse_waiting(int listen_fd, std::span<const std::byte> refusal, size_t max) {
    size_t refused = 0;
    while (refused < max) {
        UniqueFd client(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
        if (!client.valid()) {
            const bool table_full = errno == EMFILE || errno == ENFILE;
            if (table_full && release_one())
                continue;  // the first time, or another thread took the slot a spare freed
            break;         // the queue is empty (EAGAIN), or no spare is left
        }
        // A fresh socket's buffer takes the whole message; what does not fit is dropped.
        (void)!::send(client.get(), refusal.data(), refusal.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        ++refused;
    }
    (void)refill();
    return refused;
}

bool FdReserve::release_one() noexcept {
    for (UniqueFd& spare : spares_) {
        if (spare.valid()) {
            spare.reset();
            return true;
        }
    }
    return false;
}

bool FdReserve::refill() {
    bool all = true;
    for (UniqueFd& spare : spares_) {
        if (!spare.valid())
            spare.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
        all = all && spare.valid();
    }
    return all;
}

size_t FdReserve::spares() const noexcept {
    return static_cast<size_t>(
        std::count_if(spares_.begin(), spares_.end(), [](const UniqueFd& s) { return s.valid(); }));
}

}  // namespace l5pg::daemon
