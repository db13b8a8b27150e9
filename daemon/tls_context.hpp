// The TLS server context of the TCP listener (tls.* keys): certificate, key and, when
// tls.ca_file is set, the CA client certificates must chain to. OpenSSL's SSL_CTX is safe
// to share between the workers' threads for creating connections.
#pragma once

#include <openssl/ssl.h>

#include <memory>

#include "config/config.hpp"
#include "daemon/c_handle.hpp"

namespace l5pg::daemon {

using SslPtr = CHandle<SSL, SSL_free>;

class TlsContext {
  public:
    // Throws std::runtime_error naming the key and OpenSSL's reason when a file cannot be
    // loaded or the key does not match the certificate.
    explicit TlsContext(const config::TlsConfig& cfg);

    // A server-side connection on `fd` (non-blocking), or null with OpenSSL's error queue set.
    [[nodiscard]] SslPtr accept_on(int fd) const;

  private:
    CHandle<SSL_CTX, SSL_CTX_free> ctx_;
};

// OpenSSL's last error as text ("" when the queue is empty); clears the queue.
[[nodiscard]] std::string tls_error_text();

}  // namespace l5pg::daemon
