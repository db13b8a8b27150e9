// The BackendKeyData Postgres sends a new session, picked out of copies of its first bytes
// (never out of a client's shared memory) until its first ReadyForQuery, after which
// Postgres sends no key. l5pgd forwards a CancelRequest only with a key of a session it
// serves (daemon/cancel_keys.hpp), as PgBouncer does. On the way it notes whether Postgres
// asked the client to authenticate before its AuthenticationOk: under auth passthrough a
// login nobody was asked for is one pg_hba.conf granted to l5pgd, not to the client.
// Pure code, no I/O.
#pragma once

#include <cstddef>
#include <optional>
#include <span>

#include "protocol/framing.hpp"
#include "protocol/startup.hpp"

namespace l5pg::protocol {

class BackendKeyWatcher {
  public:
    // Watching: more bytes may still hold the key. Done: the first ReadyForQuery came (key()
    // says whether a key preceded it), or the bytes were not a session's start we can read.
    enum class Status { Watching, Done };
    // Bytes the session's start may take before the watcher gives up (with no key).
    static constexpr size_t kMaxSize = 64 * 1024;

    Status feed(std::span<const std::byte> bytes);
    [[nodiscard]] std::optional<CancelKey> key() const noexcept { return key_; }
    // The first ReadyForQuery came: Postgres accepted the login.
    [[nodiscard]] bool logged_in() const noexcept { return logged_in_; }
    // AuthenticationOk came with no authentication request before it (trust or peer for
    // l5pgd's own connection). Complete messages only: known before the message is passed on.
    [[nodiscard]] bool accepted_without_asking() const noexcept { return accepted_without_asking_; }
    // An authentication request (AuthenticationSASL, ...MD5Password, ...) came.
    [[nodiscard]] bool asked() const noexcept { return asked_; }

  private:
    MessageBuffer buffer_;
    std::optional<CancelKey> key_;
    Status status_ = Status::Watching;
    bool logged_in_ = false;
    bool asked_ = false;  // an authentication request (R, code other than 0) came
    bool accepted_without_asking_ = false;

    void note_authentication(std::span<const std::byte> body) noexcept;
};

}  // namespace l5pg::protocol
