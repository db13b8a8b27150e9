#include "daemon/fd_limit.hpp"

#include <sys/resource.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/foreign_fds.hpp"

namespace l5pg::daemon {

void raise_fd_limit(const config::Config& config) {
    const config::LimitsConfig& limits = config.limits;
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0)
        return;
    if (limit.rlim_cur < limit.rlim_max) {
        limit.rlim_cur = limit.rlim_max;
        (void)::setrlimit(RLIMIT_NOFILE, &limit);
        (void)::getrlimit(RLIMIT_NOFILE, &limit);
    }
    const rlim_t workers = std::max(1u, config.workers.count);
    const rlim_t lingering = config.rdma.enabled ? lingering_share(config) * workers : 0;
    // Server connections kept for the pool, beside the sessions': each worker keeps its share
    // of pool.max_idle, rounded up.
    const rlim_t kept = config.pool.mode == config::PoolMode::Session
                            ? (config.pool.max_idle + workers - 1) / workers * workers
                            : 0;
    const rlim_t needed = rlim_t{2} * limits.max_sessions + limits.max_startup_sessions +
                          2 * lingering + kept + ForeignFds::kMostHeld + 64;
    if (limit.rlim_cur < needed)
        spdlog::warn(
            "open file limit {} is below the {} that limits.max_sessions={} needs (with "
            "limits.max_startup_sessions={}{}{}); raise it (systemd: LimitNOFILE=, shell: "
            "ulimit -n)",
            limit.rlim_cur, needed, limits.max_sessions, limits.max_startup_sessions,
            lingering > 0 ? fmt::format(", {} lingering RDMA channels", lingering) : "",
            kept > 0 ? fmt::format(", {} kept server connections", kept) : "");
}

}  // namespace l5pg::daemon
