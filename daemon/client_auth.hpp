// The client check l5pgd owns (README "Security model"): may this client ask for this
// database role? Postgres sees every upstream connection as l5pgd's own OS user, so
// without this check its peer/trust rules for that user would apply to every client.
// Pure: the caller supplies the peer's identity and OS user name.
#pragma once

#include <string>
#include <string_view>

#include "config/config.hpp"
#include "daemon/auth_failure.hpp"
#include "daemon/ident_map.hpp"
#include "daemon/peer.hpp"

namespace l5pg::daemon {

struct AuthVerdict {
    AuthFailure failure = AuthFailure::None;
    std::string message;  // for the client's ErrorResponse (SQLSTATE 28000)
    [[nodiscard]] bool allowed() const noexcept { return failure == AuthFailure::None; }
};

struct AuthRequest {
    bool local = false;     // Unix socket or SHM (auth.local), else TCP or RDMA (auth.tcp)
    uid_t uid = 0;          // local only
    std::string os_user;    // local only: uid's name, "" if it has none
    std::string_view role;  // the StartupMessage's "user"
};

[[nodiscard]] AuthVerdict check_client(const config::AuthConfig& cfg, const IdentMap& ident,
                                       const AuthRequest& request);

}  // namespace l5pg::daemon
