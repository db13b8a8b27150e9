#include "daemon/tls_context.hpp"

#include <openssl/err.h>

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace l5pg::daemon {

std::string tls_error_text() {
    std::string text;
    while (const unsigned long code = ERR_get_error()) {
        char buf[256];
        ERR_error_string_n(code, buf, sizeof buf);
        text += text.empty() ? buf : std::string("; ") + buf;
    }
    return text;
}

namespace {

[[noreturn]] void fail(std::string_view key, const std::string& path) {
    throw std::runtime_error(fmt::format("{} \"{}\": {}", key, path, tls_error_text()));
}

// OpenSSL's own callback would prompt on the terminal for an encrypted key's passphrase,
// stopping l5pgd's main thread (accept loop, signals, watchdog) at a hidden prompt when
// started in the foreground. This one notes that a passphrase was wanted and gives none.
int refuse_passphrase(char*, int, int, void* asked) {
    *static_cast<bool*>(asked) = true;
    return -1;
}

}  // namespace

TlsContext::TlsContext(const config::TlsConfig& cfg) : ctx_(SSL_CTX_new(TLS_server_method())) {
    if (!ctx_)
        throw std::runtime_error("tls: cannot create an OpenSSL context: " + tls_error_text());
    SSL_CTX* ctx = ctx_.get();
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);  // what PostgreSQL 15 defaults to
    // The ByteQueue's front moves between retries of a partial write.
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    // No session resumption: no tickets to write after the handshake, when the session
    // only expects to read. num_tickets covers TLS 1.3, SSL_OP_NO_TICKET TLS 1.2's
    // stateless tickets (with tls.ca_file set, a TLS 1.2 client resuming from one failed
    // its handshake: no session id context), as Postgres sets both.
    SSL_CTX_set_num_tickets(ctx, 0);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
    // A client that leaves without close_notify (a killed psql) has left, as over a plain
    // socket: OpenSSL 3 otherwise reports an "unexpected eof" protocol error. PostgreSQL's
    // messages carry their own lengths, so a cut stream is noticed without it.
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    // No renegotiation, as Postgres sets it (be_tls_init). OpenSSL 3 refuses a client's
    // request by default already (openssl s_client's R gets "no renegotiation"); said here
    // so that no library default decides it.
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
    if (SSL_CTX_use_certificate_chain_file(ctx, cfg.cert_file.c_str()) != 1)
        fail("tls.cert_file", cfg.cert_file);
    bool passphrase_asked = false;
    SSL_CTX_set_default_passwd_cb(ctx, refuse_passphrase);
    SSL_CTX_set_default_passwd_cb_userdata(ctx, &passphrase_asked);
    const bool key_loaded =
        SSL_CTX_use_PrivateKey_file(ctx, cfg.key_file.c_str(), SSL_FILETYPE_PEM) == 1;
    SSL_CTX_set_default_passwd_cb(ctx, nullptr);  // `passphrase_asked` ends here
    SSL_CTX_set_default_passwd_cb_userdata(ctx, nullptr);
    if (!key_loaded && passphrase_asked)
        throw std::runtime_error(fmt::format(
            "tls.key_file \"{}\": encrypted with a passphrase, which l5pgd does not ask for: "
            "store the key unencrypted, readable by l5pgd's user only",
            cfg.key_file));
    if (!key_loaded)
        fail("tls.key_file", cfg.key_file);
    if (SSL_CTX_check_private_key(ctx) != 1)
        fail("tls.key_file (does not match tls.cert_file)", cfg.key_file);
    if (!cfg.ca_file.empty()) {
        if (SSL_CTX_load_verify_locations(ctx, cfg.ca_file.c_str(), nullptr) != 1)
            fail("tls.ca_file", cfg.ca_file);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
        // The CAs named in the CertificateRequest, as Postgres sends them: clients that pick
        // a certificate by its issuer (Java's key managers) otherwise send none.
        STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(cfg.ca_file.c_str());
        if (names == nullptr)
            fail("tls.ca_file", cfg.ca_file);
        SSL_CTX_set_client_CA_list(ctx, names);
    }
}

SslPtr TlsContext::accept_on(int fd) const {
    SslPtr ssl(SSL_new(ctx_.get()));
    if (ssl && SSL_set_fd(ssl.get(), fd) == 1) {
        SSL_set_accept_state(ssl.get());
        return ssl;
    }
    return nullptr;
}

}  // namespace l5pg::daemon
