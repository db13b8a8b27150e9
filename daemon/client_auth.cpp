#include "daemon/client_auth.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "daemon/utf8_text.hpp"
#include "protocol/startup.hpp"

namespace l5pg::daemon {

namespace {

AuthVerdict refuse(AuthFailure failure, std::string message) {
    return AuthVerdict{failure, std::move(message)};
}

// Postgres cuts a role name to 63 bytes before it looks it up (protocol::postgres_name): a
// longer name passing the check below would log in as the role its first 63 bytes name,
// which may be someone else's. Directly, peer authentication compares the cut name with the
// OS user and refuses; so does l5pgd.
constexpr size_t kMaxRoleNameBytes = protocol::kMaxNameBytes;

// SO_PEERCRED could not be read (peer.hpp): no rule may match, not even a numeric one.
constexpr uid_t kUnknownUid = static_cast<uid_t>(-1);

// auth.local=peer: like Postgres's peer method, the role must be the client's OS user
// name, or the ident map must list the pair. The map may name the uid in decimal instead:
// a client in another container has a uid that l5pgd's /etc/passwd may not know.
AuthVerdict check_peer(const IdentMap& ident, const AuthRequest& request) {
    // The name as the refusal shows it: valid UTF-8 for the client's driver, at most what
    // Postgres would show (a StartupMessage may hold 10 KB of anything). Refusals only.
    const auto shown = [&request] { return valid_utf8(request.role, kMaxRoleNameBytes); };
    if (request.role.size() > kMaxRoleNameBytes)
        return refuse(AuthFailure::PeerMismatch,
                      fmt::format("l5pgd: peer authentication failed: role name \"{}...\" is "
                                  "longer than {} bytes (rule auth.local=peer)",
                                  shown(), kMaxRoleNameBytes));
    if (request.uid == kUnknownUid)
        return refuse(AuthFailure::UnknownOsUser,
                      fmt::format("l5pgd: peer authentication failed for user \"{}\": the "
                                  "client's credentials could not be read (rule auth.local=peer)",
                                  shown()));
    if (ident.allows(std::to_string(request.uid), request.role))
        return {};
    if (request.os_user.empty())
        return refuse(AuthFailure::UnknownOsUser,
                      fmt::format("l5pgd: peer authentication failed for user \"{}\": the "
                                  "client's uid {} has no OS user name (rule auth.local=peer)",
                                  shown(), request.uid));
    // An all-digit OS-USER in the map is a uid (checked above), never a name of those digits.
    const bool numeric_name = std::all_of(request.os_user.begin(), request.os_user.end(),
                                          [](char c) { return c >= '0' && c <= '9'; });
    if (request.role == request.os_user ||
        (!numeric_name && ident.allows(request.os_user, request.role)))
        return {};
    return refuse(AuthFailure::PeerMismatch,
                  fmt::format("l5pgd: peer authentication failed for user \"{}\": OS user \"{}\" "
                              "may not use this role (rule auth.local=peer, auth.ident_file)",
                              shown(), valid_utf8(request.os_user)));
}

}  // namespace

AuthVerdict check_client(const config::AuthConfig& cfg, const IdentMap& ident,
                         const AuthRequest& request) {
    const config::AuthMethod method = cfg.method_for(request.local);
    const std::string_view rule = request.local ? "auth.local" : "auth.tcp";
    if (method == config::AuthMethod::Reject)
        return refuse(AuthFailure::Rejected,
                      fmt::format("l5pgd: {} clients are not accepted (rule {}=reject)",
                                  request.local ? "local" : "TCP", rule));
    if (request.role.empty())
        return refuse(AuthFailure::NoRole,
                      "l5pgd: no PostgreSQL user name specified in the "
                      "startup packet");
    if (method == config::AuthMethod::Peer)
        return check_peer(ident, request);
    return {};  // trust, or passthrough: Postgres authenticates
}

}  // namespace l5pg::daemon
