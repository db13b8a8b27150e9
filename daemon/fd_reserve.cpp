#include "daemon/fd_reserve.hpp"

#include <fcntl.h>
#include <sys/socket.h>

namespace l5pg::daemon {

size_t FdReserve::refuse_waiting(int listen_fd, std::span<const std::byte> refusal, size_t max) {
    spare_.reset();
    size_t refused = 0;
    while (refused < max) {
        UniqueFd client(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
        if (!client.valid())
            break;  // the queue is empty (EAGAIN), or another thread took the free slot
        // A fresh socket's buffer takes the whole message; what does not fit is dropped.
        (void)!::send(client.get(), refusal.data(), refusal.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        ++refused;
    }
    (void)refill();
    return refused;
}

bool FdReserve::refill() {
    if (!spare_.valid())
        spare_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    return spare_.valid();
}

}  // namespace l5pg::daemon
