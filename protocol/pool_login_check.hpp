// Before a kept server connection serves its next client (daemon/session_pool.cpp), what
// Postgres checks only when a backend starts is asked again: the backend's role must still
// be the one a new login by that name would get (not renamed, nor replaced by a new role of
// the old name), may still log in (NOLOGIN), and its database must still take it (its name,
// datallowconn, the CONNECT privilege), and the role's and the database's CONNECTION LIMIT
// must not be exceeded, the backend counted as the new login. Any other answer, an error included,
// fails: l5pgd then opens a new backend, where Postgres's own checks apply and the client gets
// Postgres's own refusal. (pg_hba.conf is not visible to a role: pool.server_lifetime_ms bounds
// that.) Pure code, no I/O.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/framing.hpp"
#include "protocol/server_greeting.hpp"

namespace l5pg::protocol {

class PoolLoginCheck {
  public:
    enum class Status { NeedMore, Passed, Failed };

    // The names the client's StartupMessage gave (the database defaulted to the role).
    PoolLoginCheck(std::string_view role, std::string_view database);
    // One Query message.
    [[nodiscard]] static std::vector<std::byte> request();
    // Bytes copied from the upstream socket after the request was sent. ParameterStatus
    // reports (a setting changed while the backend was idle) update `greeting`. Bytes after
    // the ReadyForQuery fail the check.
    Status feed(std::span<const std::byte> bytes, ServerGreeting& greeting);
    // Why the check failed, for the log.
    [[nodiscard]] const std::string& failure() const noexcept { return failure_; }

  private:
    Status parse(ServerGreeting& greeting);
    Status fail(std::string why);
    [[nodiscard]] bool row_passes(std::span<const std::byte> body);

    std::string role_;
    std::string database_;
    MessageBuffer buffer_;
    bool row_seen_ = false;
    bool row_passed_ = false;
    char expected_ = 'T';  // the next message of the answer
    Status status_ = Status::NeedMore;
    std::string failure_;
};

}  // namespace l5pg::protocol
