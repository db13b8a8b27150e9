// HTTP endpoint serving GET /metrics (Prometheus), /healthz and /readyz (daemon/health.hpp)
// on its own thread, via libevent evhttp.
#pragma once

#include <memory>
#include <string>

#include "daemon/health.hpp"
#include "daemon/metrics.hpp"

namespace l5pg::daemon {

class MetricsServer {
  public:
    // Binds host:port immediately (throws std::runtime_error with a clear message on
    // failure, e.g. address in use) and serves on a background thread until destroyed.
    // GET /metrics -> 200 text/plain; version=0.0.4; /healthz and /readyz -> 200 "ok" or
    // 503 with what is wrong; any other path -> 404.
    MetricsServer(const std::string& host, uint16_t port, const Metrics& metrics,
                  const Health& health);
    ~MetricsServer();
    MetricsServer(const MetricsServer&) = delete;
    MetricsServer& operator=(const MetricsServer&) = delete;

    [[nodiscard]] uint16_t port() const noexcept;  // the bound port (useful with port 0)

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace l5pg::daemon
