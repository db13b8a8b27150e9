// Why l5pgd refused a client's StartupMessage (daemon/client_auth.hpp); also the label
// of l5pg_auth_failures_total{reason}.
#pragma once

#include <cstddef>
#include <string_view>

namespace l5pg::daemon {

enum class AuthFailure {
    None,
    Rejected,
    PeerMismatch,
    UnknownOsUser,
    NoRole,
    TlsRequired,
    AdminConsole,  // admin.database asked for by a role not in admin.users (or passthrough)
    // passthrough, and Postgres accepted the login without asking the client anything
    UpstreamDidNotAuthenticate,
};
inline constexpr size_t kAuthFailureCount = 8;

[[nodiscard]] constexpr std::string_view to_string(AuthFailure f) noexcept {
    switch (f) {
        case AuthFailure::None:
            return "none";
        case AuthFailure::Rejected:
            return "rejected";
        case AuthFailure::PeerMismatch:
            return "peer_mismatch";
        case AuthFailure::UnknownOsUser:
            return "unknown_os_user";
        case AuthFailure::NoRole:
            return "no_role";
        case AuthFailure::TlsRequired:
            return "tls_required";
        case AuthFailure::AdminConsole:
            return "admin_console";
        case AuthFailure::UpstreamDidNotAuthenticate:
            return "upstream_did_not_authenticate";
    }
    return "?";
}

}  // namespace l5pg::daemon
