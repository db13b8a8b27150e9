#include "transport/rdma/channel/exchange.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <cerrno>

#include "transport/rdma/sys.hpp"
#include "transport/wait/deadline.hpp"

namespace l5pg::rdma {
namespace {

// Waits for `events` on fd until the deadline. False with `error` on timeout/failure.
bool wait_for(int fd, short events, const wait::Deadline& deadline, std::string& error) {
    const int rc = wait::wait_ready(fd, events, deadline);
    if (rc == 0)
        error = "timed out exchanging RDMA connection data";
    else if (rc < 0)
        error = sys::errno_text("poll", errno);
    return rc > 0;
}

}  // namespace

bool send_hello(int fd, const Hello& hello, std::chrono::milliseconds timeout, std::string& error) {
    std::array<std::byte, kHelloSize> bytes;
    encode_hello(hello, bytes);
    const auto deadline = wait::Deadline::after(timeout);
    size_t sent = 0;
    while (sent < bytes.size()) {
        const ssize_t n = sys::send_raw(fd, bytes.data() + sent, bytes.size() - sent,
                                        MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            sent += static_cast<size_t>(n);
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!wait_for(fd, POLLOUT, deadline, error))
                return false;
        } else if (!(n < 0 && errno == EINTR)) {
            error = sys::errno_text("send of the RDMA hello", n < 0 ? errno : EPIPE);
            return false;
        }
    }
    return true;
}

bool recv_hello(int fd, Hello& hello, std::chrono::milliseconds timeout, std::string& error) {
    std::array<std::byte, kHelloSize> bytes;
    const auto deadline = wait::Deadline::after(timeout);
    size_t got = 0;
    while (got < bytes.size()) {
        const ssize_t n = sys::recv_raw(fd, bytes.data() + got, bytes.size() - got, MSG_DONTWAIT);
        if (n > 0) {
            got += static_cast<size_t>(n);
        } else if (n == 0) {
            error = "peer closed the connection during the RDMA hello";
            return false;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (!wait_for(fd, POLLIN, deadline, error))
                return false;
        } else if (errno != EINTR) {
            error = sys::errno_text("recv of the RDMA hello", errno);
            return false;
        }
    }
    return decode_hello(bytes, hello, error);
}

}  // namespace l5pg::rdma
