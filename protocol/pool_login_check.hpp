// What Postgres checks only when a backend starts, asked again of a kept server connection
// (daemon/session_pool.cpp) before it serves its next client: the backend's role must still
// be the one a new login by that name would get (not renamed, nor replaced by a new role of
// the old name), may still log in (NOLOGIN), and its database must still take it (its name,
// datallowconn, the CONNECT privilege), and the role's and the database's CONNECTION LIMIT
// must not be exceeded, the backend counted as the new login; the role it runs as (set at
// login) must still be granted to its login role, and its client must have set no
// superuser-only parameter at login (a grant checked then only), and its database must have no
// login event trigger (Postgres 17: it runs when a backend starts). The same query also reads the
// settings a login takes from pg_db_role_setting (ALTER ROLE / ALTER DATABASE ... SET,
// ALTER ROLE ... IN DATABASE ... SET, ALTER ROLE ALL SET): asked right after a new backend's
// greeting (Purpose::AtStart) they are what the backend runs with, and before each reuse
// they must still be the same, or a new login would get other settings (the role's SUPERUSER
// attribute is part of them, and so is the name of the role the backend runs as: a role set
// at login by a name that was renamed, and perhaps given to a new role since, is not the one a
// new login by that name would get).
//
// Any other answer, an error included, fails. Before a reuse l5pgd then opens a new backend,
// where Postgres's own checks apply and the client gets Postgres's own refusal; at the start
// the backend serves its client but is not kept. (pg_hba.conf is not visible to a role:
// pool.server_lifetime_ms bounds that.) Pure code, no I/O.
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
    enum class Purpose {
        AtStart,      // a new backend's, before its client is greeted: notes its settings
        BeforeReuse,  // a kept backend's, before its next client: compares them
    };

    // The names the client's StartupMessage gave (the database defaulted to the role);
    // before a reuse, the settings the backend's own check at its start read.
    PoolLoginCheck(std::string_view role, std::string_view database, Purpose purpose,
                   std::string settings_at_start = {});
    // One Query message.
    [[nodiscard]] static std::vector<std::byte> request();
    // Bytes copied from the upstream socket after the request was sent. ParameterStatus
    // reports (a setting changed while the backend was idle) update `greeting`. An error
    // (ERROR) or any other answer fails once its ReadyForQuery is in; a FATAL fails at once
    // and is not taken: rest() begins with it. Before a reuse, bytes after the
    // ReadyForQuery fail the check.
    Status feed(std::span<const std::byte> bytes, ServerGreeting& greeting);
    [[nodiscard]] Purpose purpose() const noexcept { return purpose_; }
    // Why the check failed, for the log.
    [[nodiscard]] const std::string& failure() const noexcept { return failure_; }
    // After Passed: the login's settings as the answer gave them (one text; equal texts are
    // equal settings).
    [[nodiscard]] const std::string& settings() const noexcept { return settings_; }
    // After Passed or Failed: whether the answer was followed to its end (or a FATAL ended
    // it), so that rest() begins at a message of Postgres's stream. If not (a broken frame,
    // an answer without end), the connection cannot be used any more.
    [[nodiscard]] bool followed() const noexcept { return followed_; }
    // After Passed, or Failed and followed(), at the start: what Postgres sent beyond the
    // answer, which is the client's (answers to what a pipelining client sent, a FATAL).
    [[nodiscard]] std::span<const std::byte> rest() const noexcept { return buffer_.rest(); }

  private:
    Status parse(ServerGreeting& greeting);
    void take(const MessageView& msg);
    Status at_ready(std::span<const std::byte> body);
    Status fail(std::string why);
    void fail_at_ready(std::string why);
    [[nodiscard]] bool row_passes(std::span<const std::byte> body);

    std::string role_;
    std::string database_;
    Purpose purpose_;
    std::string settings_;  // before a reuse: the expected ones; at the start: as read
    MessageBuffer buffer_;
    bool row_seen_ = false;
    bool row_passed_ = false;
    bool errored_ = false;   // the check fails at the ReadyForQuery (fail_at_ready())
    bool followed_ = false;  // see followed()
    char expected_ = 'T';    // the next message of the answer
    Status status_ = Status::NeedMore;
    std::string failure_;
};

}  // namespace l5pg::protocol
