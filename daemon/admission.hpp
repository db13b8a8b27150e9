// What l5pgd checks before it serves a client, as configured: the auth rules with their
// ident map (applied by the session to its StartupMessage), the TLS context and who may use
// the admin console. Built from one configuration and never changed: a reload builds a new
// one (daemon/settings.hpp). The state shared across reloads (startup caps, attached SHM
// segments, the directory of admitted sessions) is in AdmissionState.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <memory>
#include <string>

#include "config/config.hpp"
#include "daemon/cancel_guess_limiter.hpp"
#include "daemon/cancel_keys.hpp"
#include "daemon/foreign_fds.hpp"
#include "daemon/ident_map.hpp"
#include "daemon/lost_addresses.hpp"
#include "daemon/metrics.hpp"
#include "daemon/peer.hpp"
#include "daemon/pool_directory.hpp"
#include "daemon/reload_ledger.hpp"
#include "daemon/room_requests.hpp"
#include "daemon/segment_registry.hpp"
#include "daemon/session_cap.hpp"
#include "daemon/session_directory.hpp"
#include "daemon/startup_limiter.hpp"
#include "daemon/tls_context.hpp"
#include "daemon/unique_fd.hpp"
#include "daemon/worker_wakers.hpp"

namespace l5pg::daemon {

struct Admission {
    // Throws std::runtime_error when auth.ident_file or the tls.* files cannot be loaded.
    // Keeps references to config.auth and config.admin: `config` must outlive it.
    explicit Admission(const config::Config& config)
        : auth(config.auth),
          tls_mode(config.tls.mode),
          ident(IdentMap::load(config.auth.ident_file)),
          tls(config.tls.mode == config::TlsMode::Disable
                  ? nullptr
                  : std::make_unique<TlsContext>(config.tls)),
          admin(config.admin) {}

    const config::AuthConfig& auth;
    const config::TlsMode tls_mode;
    const IdentMap ident;
    // Null when tls.mode is disable. An SSL made from it holds its own reference to the
    // SSL_CTX, so a session's TLS connection outlives a reload that replaces this.
    const std::unique_ptr<const TlsContext> tls;
    const config::AdminConfig& admin;
};

// One per l5pgd, shared by the acceptor thread and the workers, kept across reloads.
struct AdmissionState {
    explicit AdmissionState(const config::LimitsConfig& limits)
        : startup(limits.max_startup_sessions, limits.max_startup_per_peer),
          cancel_guesses(limits.wrong_cancel_keys_per_second,
                         limits.wrong_cancel_keys_per_second_per_peer) {}

    StartupLimiter startup;     // its caps follow reloads (StartupLimiter::set_caps)
    SessionCap session_cap;     // limits.max_sessions
    Capacity rdma_memory;       // rdma.max_memory: bytes of the RDMA sessions' rings
    Capacity consoles;          // admin console sessions (SIGINT's drain does not wait for them)
    SegmentRegistry segments;   // SHM segments attached to live sessions
    SessionDirectory sessions;  // who passed the check, for the admin console
    CancelKeys cancel_keys;     // the keys clients of pooled server connections hold
    CancelGuessLimiter cancel_guesses;  // its rates follow reloads (set_rates)
    ForeignFds foreign_fds;             // descriptors clients passed that no worker may close
    PoolDirectory pools;                // the server connections kept idle, for the admin console
    WorkerWakers wakers;                // each worker adds its own before the workers run
    RoomRequests room{wakers};          // kept backends to end for logins Postgres refused (53300)
    LostAddressBulletin lost_addresses{wakers};  // upstream.host's, as lookups find them
    ReloadLedger reloads;                        // the admin console's RELOADs and their outcomes
    // Set by SIGINT: a StartupMessage gets FATAL 57P03 while CancelRequests are still
    // forwarded, as from a Postgres in smart shutdown (the listeners stay open for them).
    std::atomic<bool> draining{false};
};

// A client the acceptor let in, on its way to a worker.
struct AcceptedClient {
    UniqueFd fd;
    Transport listener = Transport::Unix;
    PeerIdentity peer;
    StartupLimiter::Slot startup_slot;  // released once the StartupMessage is complete
};

// What a client refused for `refusal` is told (FATAL 53300).
[[nodiscard]] inline std::string too_many_connections_message(ConnectionRefusal refusal) {
    return fmt::format("l5pgd: too many connections (limits.{} reached)", to_string(refusal));
}

}  // namespace l5pg::daemon
