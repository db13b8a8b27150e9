#include "daemon/client_stream.hpp"

#include <openssl/err.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

namespace l5pg::daemon {

ClientStream::Handshake ClientStream::handshake(std::string& error) {
    ERR_clear_error();
    const int ret = SSL_do_handshake(ssl_.get());
    if (ret == 1) {
        handshake_done_ = true;
        wants_write_ = false;
        return Handshake::Done;
    }
    const int err = SSL_get_error(ssl_.get(), ret);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        wants_write_ = err == SSL_ERROR_WANT_WRITE;
        return Handshake::Pending;
    }
    error = tls_error_text();
    if (error.empty())
        error = err == SSL_ERROR_SYSCALL && errno != 0 ? std::strerror(errno)
                                                       : "the client closed the connection";
    return Handshake::Failed;
}

ssize_t ClientStream::recv(void* buf, size_t len, wait::PassedFds& passed) noexcept {
    if (!ssl_)  // TLS is TCP only: no descriptors come through it
        return wait::recv_taking_fds(fd_, buf, len, MSG_DONTWAIT, passed);
    ERR_clear_error();
    return tls_result(SSL_read(ssl_.get(), buf, static_cast<int>(std::min<size_t>(len, INT_MAX))));
}

ssize_t ClientStream::send(const void* buf, size_t len) noexcept {
    if (!ssl_)
        return ::send(fd_, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    ERR_clear_error();
    return tls_result(SSL_write(ssl_.get(), buf, static_cast<int>(std::min<size_t>(len, INT_MAX))));
}

// Maps an SSL_read/SSL_write result onto the system call's conventions.
ssize_t ClientStream::tls_result(int ret) noexcept {
    if (ret > 0) {
        wants_write_ = false;
        return ret;
    }
    switch (SSL_get_error(ssl_.get(), ret)) {
        case SSL_ERROR_WANT_READ:
            wants_write_ = false;
            errno = EAGAIN;
            return -1;
        case SSL_ERROR_WANT_WRITE:
            wants_write_ = true;
            errno = EAGAIN;
            return -1;
        case SSL_ERROR_ZERO_RETURN:  // close_notify, or an EOF without it: a clean end
            return 0;                // (SSL_OP_IGNORE_UNEXPECTED_EOF, tls_context.cpp)
        case SSL_ERROR_SYSCALL:
            if (errno == 0)
                errno = ECONNRESET;
            return -1;
        default:
            ERR_clear_error();
            errno = EPROTO;  // a TLS protocol error: the stream cannot go on
            return -1;
    }
}

size_t ClientStream::pending() const noexcept {
    return ssl_ ? static_cast<size_t>(SSL_pending(ssl_.get())) : 0;
}

bool ClientStream::end_tls() noexcept {
    if (pending() != 0)
        return false;
    ssl_.reset();
    return true;
}

void ClientStream::say_goodbye() noexcept {
    if (ssl_ && handshake_done_) {
        (void)SSL_shutdown(ssl_.get());
        ERR_clear_error();
    }
}

}  // namespace l5pg::daemon
