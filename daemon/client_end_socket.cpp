#include "daemon/client_end_socket.hpp"

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace l5pg::daemon {
namespace {

[[nodiscard]] bool transient(int err) noexcept {
    return err == EAGAIN || err == EINTR;
}

}  // namespace

SocketClientEnd::SocketClientEnd(ClientStream& stream, ClientEndHost& host) noexcept
    : QueuedClientEnd(host), stream_(stream) {}

void SocketClientEnd::fill_input() {
    // A departed client's socket still holds what it sent before EOF or a reset: the
    // kernel hands that out first. Read on until it has nothing more.
    const bool gone = host_.client_gone();
    if (!eof_ && (readable_ || gone || stream_.pending() > 0)) {
        std::span<std::byte> space = in_.prepare(kChunk);
        wait::PassedFds passed;
        const ssize_t n = stream_.recv(space.data(), space.size(), passed);
        const int err = errno;
        if (passed.count > 0) {
            in_.commit(0);
            host_.client_passed_fds(passed);
            return;
        }
        in_.commit(n > 0 ? static_cast<size_t>(n) : 0);
        // A short read emptied the socket (TLS: unless OpenSSL holds more).
        readable_ = n == static_cast<ssize_t>(kChunk) || stream_.pending() > 0;
        if (n == 0 || (n < 0 && !transient(err)) || (n < 0 && gone && err == EAGAIN)) {
            // EOF, an error, or EAGAIN from a client that left: it sends nothing more.
            eof_ = true;
            host_.client_socket_ended();
            host_.client_departed(n == 0 ? std::string("client disconnected")
                                         : fmt::format("client read error: {}", std::strerror(err)),
                                  n < 0 && err != ECONNRESET, /*may_still_read=*/n == 0);
        }
    }
}

void SocketClientEnd::want_input(bool on) {
    host_.watch_client_readable(on && !host_.client_gone() && !eof_);
}

void SocketClientEnd::send_if_room(std::span<const std::byte> message) {
    if (out_.empty())
        (void)stream_.send(message.data(), message.size());
}

void SocketClientEnd::flush() {
    if (host_.discarding_output())
        out_.clear();
    if (write_blocked_ && !out_.empty())
        return;  // the writable event resumes us (on_socket_writable)
    while (!out_.empty()) {
        const auto data = out_.front();
        const ssize_t n = stream_.send(data.data(), data.size());
        if (n > 0) {
            out_.consume(static_cast<size_t>(n));
        } else if (n < 0 && errno == EAGAIN) {
            write_blocked_ = true;
            host_.watch_client_writable(true);
            return;
        } else if (!(n < 0 && errno == EINTR)) {
            // Undeliverable; from now on the host discards Postgres's output.
            const int err = errno;
            out_.clear();
            host_.watch_client_writable(false);
            // EPIPE, ECONNRESET: the client left; anything else is a failure, counted as
            // one, as on the reading side.
            host_.client_departed(fmt::format("client write error: {}", std::strerror(err)),
                                  err != EPIPE && err != ECONNRESET);
            return;
        }
    }
    write_blocked_ = false;
    host_.watch_client_writable(false);
}

void SocketClientEnd::on_client_gone(bool may_still_read) {
    if (!may_still_read) {
        host_.watch_client_writable(false);
        out_.clear();
    }
}

}  // namespace l5pg::daemon
