#include "clientlib/handshake_stream.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "clientlib/real_calls.hpp"
#include "clientlib/settings.hpp"
#include "clientlib/upgrade_common.hpp"
#include "protocol/startup.hpp"
#include "protocol/wire.hpp"

namespace l5pg::shim {
namespace {

// OpenSSL's socket BIO would call read()/write(), which are ours: the fd is still an
// upgrade candidate and its first write would start another upgrade. This BIO goes to
// libc directly and never blocks (tls_call() waits).
int fd_of(BIO* bio) {
    return static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(bio)));
}

int bio_write(BIO* bio, const char* data, int len) {
    BIO_clear_retry_flags(bio);
    const ssize_t n =
        real().send(fd_of(bio), data, static_cast<size_t>(len), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        BIO_set_retry_write(bio);
    return static_cast<int>(n);
}

int bio_read(BIO* bio, char* out, int len) {
    BIO_clear_retry_flags(bio);
    const ssize_t n = real().recv(fd_of(bio), out, static_cast<size_t>(len), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        BIO_set_retry_read(bio);
    return static_cast<int>(n);
}

long bio_ctrl(BIO*, int cmd, long, void*) {
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;  // nothing is buffered here
}

// The server's address as text, which verify-full checks when L5PG_SSLHOST is not set.
bool peer_ip(int fd, char* out, size_t size) {
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0)
        return false;
    if (peer.ss_family == AF_INET6) {
        const in6_addr& v6 = reinterpret_cast<sockaddr_in6*>(&peer)->sin6_addr;
        // An IPv6 socket connected to an IPv4 address reports it mapped (::ffff:a.b.c.d),
        // which no IPv4 entry of the certificate matches: compare the IPv4 address itself.
        if (IN6_IS_ADDR_V4MAPPED(&v6))
            return ::inet_ntop(AF_INET, &v6.s6_addr[12], out, static_cast<socklen_t>(size)) !=
                   nullptr;
        return ::inet_ntop(AF_INET6, &v6, out, static_cast<socklen_t>(size)) != nullptr;
    }
    const void* addr = &reinterpret_cast<sockaddr_in*>(&peer)->sin_addr;
    return ::inet_ntop(AF_INET, addr, out, static_cast<socklen_t>(size)) != nullptr;
}

}  // namespace

HandshakeStream::Tls HandshakeStream::fail(const char* why) {
    const unsigned long code = ERR_get_error();
    std::snprintf(error_, sizeof error_, "%s", why);
    if (code != 0) {
        const size_t used = std::strlen(error_);
        std::snprintf(error_ + used, sizeof error_ - used, ": ");
        ERR_error_string_n(code, error_ + used + 2, sizeof error_ - used - 2);
    }
    ERR_clear_error();
    ssl_.reset();
    return Tls::Failed;
}

// One per process, never freed: BIO_get_new_index() hands out at most a few hundred type
// indexes in a process's life (and the application's own calls need some too). No static
// initialisation guard (a fork() while another thread held it would block the child's
// first upgrade for good); a failure is tried again by the next upgrades, a few times.
BIO_METHOD* HandshakeStream::socket_bio_method() {
    static std::atomic<BIO_METHOD*> shared{nullptr};
    if (BIO_METHOD* known = shared.load(std::memory_order_acquire))
        return known;
    // Each attempt takes an index: a few failed ones, then no more.
    static std::atomic<int> attempts{0};
    if (attempts.fetch_add(1, std::memory_order_relaxed) >= 4)
        return nullptr;
    const int index = BIO_get_new_index();
    if (index == -1)
        return nullptr;
    BIO_METHOD* made = BIO_meth_new(index | BIO_TYPE_SOURCE_SINK, "l5pg-shim");
    if (made == nullptr || BIO_meth_set_write(made, bio_write) != 1 ||
        BIO_meth_set_read(made, bio_read) != 1 || BIO_meth_set_ctrl(made, bio_ctrl) != 1) {
        BIO_meth_free(made);
        return nullptr;
    }
    BIO_METHOD* earlier = nullptr;
    if (shared.compare_exchange_strong(earlier, made, std::memory_order_acq_rel))
        return made;
    BIO_meth_free(made);  // another thread's came first
    return earlier;
}

bool HandshakeStream::configure(SSL_CTX* ctx) {
    const Settings& s = settings();
    if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1)
        return false;
    // An encrypted key would make OpenSSL's default callback prompt for its passphrase on
    // the terminal (or read stdin) inside the application's send(): it fails to load
    // instead, and the upgrade falls back (libpq prompts neither, without sslpassword).
    SSL_CTX_set_default_passwd_cb(ctx, [](char*, int, int, void*) { return 0; });
    if (s.ssl_cert[0] != '\0' && s.ssl_key[0] != '\0' &&
        (SSL_CTX_use_certificate_chain_file(ctx, s.ssl_cert) != 1 ||
         SSL_CTX_use_PrivateKey_file(ctx, s.ssl_key, SSL_FILETYPE_PEM) != 1))
        return false;
    // As libpq: a root certificate file that exists is used whatever the mode, so `require`
    // and `prefer` verify the chain as `verify-ca` does when there is one; the verify modes
    // cannot do without.
    const bool system = std::strcmp(s.ssl_root_cert, "system") == 0;
    struct stat st {};
    const bool have_root =
        system || (s.ssl_root_cert[0] != '\0' && ::stat(s.ssl_root_cert, &st) == 0);
    if (!have_root) {
        if (s.ssl_mode == SslMode::VerifyCa || s.ssl_mode == SslMode::VerifyFull)
            return false;
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
        return true;
    }
    if (system ? SSL_CTX_set_default_verify_paths(ctx) != 1
               : SSL_CTX_load_verify_locations(ctx, s.ssl_root_cert, nullptr) != 1)
        return false;
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    return true;
}

HandshakeStream::Tls HandshakeStream::start_tls() {
    std::array<std::byte, 8> request{};
    protocol::write_be32(request.data(), 8);
    protocol::write_be32(request.data() + 4, protocol::kSslRequestCode);
    if (!send_all(request.data(), request.size()))
        return fail("sending the SSLRequest failed");
    const char answer = await_answer();
    if (answer == 'N')
        return Tls::Refused;
    if (answer != 'S')
        return fail(answer == 0 ? "no answer to the SSLRequest"
                                : "unexpected answer to the SSLRequest");
    ERR_clear_error();
    ctx_.reset(SSL_CTX_new(TLS_client_method()));
    if (!ctx_ || !configure(ctx_.get()))
        return fail("cannot set up TLS (L5PG_SSLROOTCERT, L5PG_SSLCERT, L5PG_SSLKEY)");
    BIO_METHOD* method = socket_bio_method();
    if (method == nullptr)
        return fail("cannot set up TLS");
    ssl_.reset(SSL_new(ctx_.get()));
    BIO* bio = ssl_ ? BIO_new(method) : nullptr;
    if (bio == nullptr)
        return fail("cannot set up TLS");
    BIO_set_data(bio, reinterpret_cast<void*>(static_cast<intptr_t>(fd_)));
    BIO_set_init(bio, 1);
    SSL_set_bio(ssl_.get(), bio, bio);  // the SSL owns it now
    return connect_tls() ? Tls::On : Tls::Failed;
}

bool HandshakeStream::connect_tls() {
    const Settings& s = settings();
    if (s.ssl_mode == SslMode::VerifyFull) {
        X509_VERIFY_PARAM* param = SSL_get0_param(ssl_.get());
        char ip[INET6_ADDRSTRLEN] = {};
        const bool named = s.ssl_host[0] != '\0';
        if (named ? X509_VERIFY_PARAM_set1_host(param, s.ssl_host, 0) != 1
                  : !peer_ip(fd_, ip, sizeof ip) || X509_VERIFY_PARAM_set1_ip_asc(param, ip) != 1) {
            (void)fail("cannot set the name to verify (L5PG_SSLHOST)");
            return false;
        }
        if (named)
            (void)SSL_set_tlsext_host_name(ssl_.get(), s.ssl_host);
    }
    const wait::Deadline deadline = upgrade_deadline();
    if (tls_call([&] { return SSL_connect(ssl_.get()); }, deadline) != 1) {
        const long verify = SSL_get_verify_result(ssl_.get());
        (void)fail(verify != X509_V_OK ? X509_verify_cert_error_string(verify)
                                       : "TLS handshake failed");
        return false;
    }
    return true;
}

template <class Op>
int HandshakeStream::tls_call(Op op, const wait::Deadline& deadline) {
    for (;;) {
        ERR_clear_error();
        const int r = op();
        if (r > 0)
            return r;
        const int saved = errno;
        switch (SSL_get_error(ssl_.get(), r)) {
            case SSL_ERROR_WANT_READ:
                if (wait::wait_ready(fd_, POLLIN, deadline) <= 0)
                    return -1;
                continue;
            case SSL_ERROR_WANT_WRITE:
                if (wait::wait_ready(fd_, POLLOUT, deadline) <= 0)
                    return -1;
                continue;
            case SSL_ERROR_SYSCALL:
                errno = saved != 0 ? saved : ECONNRESET;
                return -1;
            default:  // EOF (close_notify or not) or a TLS protocol error
                errno = ECONNRESET;
                return -1;
        }
    }
}

// Runs `step(done, deadline)` (bytes moved, 0 at EOF, -1 with errno) until `len`
// bytes moved, waiting for `events` on EAGAIN, within L5PG_UPGRADE_TIMEOUT_MS.
template <class Step>
bool HandshakeStream::move_all(size_t len, short events, Step step) {
    const wait::Deadline deadline = upgrade_deadline();
    size_t done = 0;
    while (done < len) {
        const ssize_t n = step(done, deadline);
        if (n > 0) {
            done += static_cast<size_t>(n);
            continue;
        }
        if (n == 0) {
            errno = ECONNRESET;
            return false;
        }
        if (errno != EINTR && (errno != EAGAIN || wait::wait_ready(fd_, events, deadline) <= 0))
            return false;
    }
    return true;
}

bool HandshakeStream::send_all(const std::byte* data, size_t len) {
    return move_all(len, POLLOUT, [&](size_t done, const wait::Deadline& deadline) -> ssize_t {
        if (!ssl_)
            return real().send(fd_, data + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        const int n = tls_call(
            [&] { return SSL_write(ssl_.get(), data + done, static_cast<int>(len - done)); },
            deadline);
        return n > 0 ? n : -1;  // tls_call() waited already; its errno is final
    });
}

bool HandshakeStream::recv_exact(std::byte* out, size_t len) {
    return move_all(len, POLLIN, [&](size_t done, const wait::Deadline& deadline) -> ssize_t {
        if (!ssl_)
            return real().recv(fd_, out + done, len - done, MSG_DONTWAIT);
        const int n =
            tls_call([&] { return SSL_read(ssl_.get(), out + done, static_cast<int>(len - done)); },
                     deadline);
        return n > 0 ? n : -1;
    });
}

char HandshakeStream::await_answer() {
    if (!ssl_)
        return shim::await_answer(fd_);
    std::byte answer{};
    return recv_exact(&answer, 1) ? static_cast<char>(answer) : 0;
}

bool HandshakeStream::drained() const {
    return !ssl_ || SSL_pending(ssl_.get()) == 0;
}

}  // namespace l5pg::shim
