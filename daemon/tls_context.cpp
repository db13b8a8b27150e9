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

}  // namespace

TlsContext::TlsContext(const config::TlsConfig& cfg) : ctx_(SSL_CTX_new(TLS_server_method())) {
    if (!ctx_)
        throw std::runtime_error("tls: cannot create an OpenSSL context: " + tls_error_text());
    SSL_CTX* ctx = ctx_.get();
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);  // what PostgreSQL 15 defaults to
    // The ByteQueue's front moves between retries of a partial write.
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    // No session resumption: no tickets to write after the handshake, when the session
    // only expects to read.
    SSL_CTX_set_num_tickets(ctx, 0);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    // No renegotiation, as Postgres sets it (be_tls_init). OpenSSL 3 refuses a client's
    // request by default already (openssl s_client's R gets "no renegotiation"); said here
    // so that no library default decides it.
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
    if (SSL_CTX_use_certificate_chain_file(ctx, cfg.cert_file.c_str()) != 1)
        fail("tls.cert_file", cfg.cert_file);
    if (SSL_CTX_use_PrivateKey_file(ctx, cfg.key_file.c_str(), SSL_FILETYPE_PEM) != 1)
        fail("tls.key_file", cfg.key_file);
    if (SSL_CTX_check_private_key(ctx) != 1)
        fail("tls.key_file (does not match tls.cert_file)", cfg.key_file);
    if (!cfg.ca_file.empty()) {
        if (SSL_CTX_load_verify_locations(ctx, cfg.ca_file.c_str(), nullptr) != 1)
            fail("tls.ca_file", cfg.ca_file);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
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
