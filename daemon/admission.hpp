// What l5pgd checks before it serves a client: the startup caps (taken by the acceptor),
// the auth rules with their ident map (applied by the session to its StartupMessage) and
// the registry of attached SHM segments (checked at each upgrade), and the directory of
// admitted sessions. One per l5pgd, shared by the acceptor thread and the workers.
#pragma once

#include <memory>

#include "config/config.hpp"
#include "daemon/ident_map.hpp"
#include "daemon/metrics.hpp"
#include "daemon/peer.hpp"
#include "daemon/segment_registry.hpp"
#include "daemon/session_directory.hpp"
#include "daemon/startup_limiter.hpp"
#include "daemon/tls_context.hpp"
#include "daemon/unique_fd.hpp"

namespace l5pg::daemon {

struct Admission {
    // Throws std::runtime_error when auth.ident_file or the tls.* files cannot be loaded.
    explicit Admission(const config::Config& config)
        : auth(config.auth),
          tls_mode(config.tls.mode),
          ident(IdentMap::load(config.auth.ident_file)),
          tls(config.tls.mode == config::TlsMode::Disable
                  ? nullptr
                  : std::make_unique<TlsContext>(config.tls)),
          startup(config.limits.max_startup_sessions, config.limits.max_startup_per_peer),
          admin(config.admin) {}

    const config::AuthConfig& auth;
    const config::TlsMode tls_mode;
    const IdentMap ident;
    const std::unique_ptr<const TlsContext> tls;  // null when tls.mode is disable
    StartupLimiter startup;
    SegmentRegistry segments;  // SHM segments attached to live sessions
    const config::AdminConfig& admin;
    SessionDirectory sessions;  // who passed the check, for the admin console
};

// A client the acceptor let in, on its way to a worker.
struct AcceptedClient {
    UniqueFd fd;
    Transport listener = Transport::Unix;
    PeerIdentity peer;
    StartupLimiter::Slot startup_slot;  // released once the StartupMessage is complete
};

}  // namespace l5pg::daemon
