// The RDMA upgrade's exchange with l5pgd on the session's TCP socket (docs/wire-format.md
// section 5), in clear or inside TLS (L5PG_SSLMODE), so that the offer, the tokens and
// the Hellos' rkeys never cross the network in clear when l5pgd has a certificate.
//
// TLS covers the handshake only. Once l5pgd has accepted the upgrade, both ends drop it
// without close_notify (l5pgd in Session::finish_rdma_accept) and the socket carries
// doorbell bytes and EOF in clear: they say nothing. The RDMA payload is not encrypted.
// If the upgrade does not happen after TLS began, the socket cannot go back to what libpq
// expects; upgrade_rdma.cpp then replaces the connection with a fresh one (reconnect.hpp).
#pragma once

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cstddef>
#include <memory>

#include "transport/wait/deadline.hpp"

namespace l5pg::shim {

class HandshakeStream {
  public:
    explicit HandshakeStream(int fd) : fd_(fd) {}

    enum class Tls {
        On,       // the rest of the handshake runs inside TLS
        Refused,  // l5pgd answered the SSLRequest with 'N': the socket is still clean
        Failed,   // TLS did not come up (error() says why): the socket is unusable
    };
    // SSLRequest, then the TLS handshake with the checks L5PG_SSLMODE asks for.
    [[nodiscard]] Tls start_tls();
    [[nodiscard]] bool encrypted() const { return ssl_ != nullptr; }
    // Why start_tls() failed.
    [[nodiscard]] const char* error() const { return error_; }

    // Bounded by L5PG_UPGRADE_TIMEOUT_MS; false with errno set on timeout, EOF or error.
    [[nodiscard]] bool send_all(const std::byte* data, size_t len);
    [[nodiscard]] bool recv_exact(std::byte* out, size_t len);
    // l5pgd's one-byte answer; 0 with errno set on timeout, EOF or error.
    [[nodiscard]] char await_answer();
    // Inside TLS: nothing l5pgd sent is left unread (anything after its last handshake
    // message would be a protocol error).
    [[nodiscard]] bool drained() const;

  private:
    struct SslFree {
        void operator()(SSL* ssl) const { SSL_free(ssl); }
    };
    struct CtxFree {
        void operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }
    };
    // OpenSSL's error queue is the thread's, shared with libpq (which reports the oldest
    // entry when its own setup fails) and the application: nothing of ours stays in it.
    struct ErrorQueueCleaner {
        ErrorQueueCleaner() = default;
        ErrorQueueCleaner(const ErrorQueueCleaner&) = delete;
        ErrorQueueCleaner& operator=(const ErrorQueueCleaner&) = delete;
        ~ErrorQueueCleaner() { ERR_clear_error(); }
    };

    [[nodiscard]] static BIO_METHOD* socket_bio_method();
    [[nodiscard]] bool configure(SSL_CTX* ctx);
    [[nodiscard]] bool connect_tls();
    // Runs `op` (an SSL call) until it succeeds, waiting for the socket as OpenSSL asks;
    // its result, or -1 with errno set.
    template <class Op>
    int tls_call(Op op, const wait::Deadline& deadline);
    template <class Step>
    [[nodiscard]] bool move_all(size_t len, short events, Step step);
    Tls fail(const char* why);

    int fd_;
    char error_[256] = {};
    ErrorQueueCleaner errors_;  // first, so that it runs after the SSL objects are freed
    std::unique_ptr<SSL_CTX, CtxFree> ctx_;
    std::unique_ptr<SSL, SslFree> ssl_;
};

}  // namespace l5pg::shim
