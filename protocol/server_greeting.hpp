// What Postgres tells a new connection before its first ReadyForQuery, kept by l5pgd's
// session pool (daemon/upstream_pool.hpp) so that a later client of the same server connection can
// be greeted without a new backend: AuthenticationOk, the ParameterStatus reports, and the
// BackendKeyData -- which l5pgd keeps to itself, giving each client a key of its own
// (daemon/cancel_keys.hpp). Pure code, no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "protocol/framing.hpp"
#include "protocol/startup.hpp"

namespace l5pg::protocol {

struct ServerGreeting {
    std::vector<std::pair<std::string, std::string>> parameters;  // in the order first reported
    CancelKey key;                                                // the backend's own

    // A ParameterStatus seen later (a reset reports what it changed back).
    void set_parameter(std::string_view name, std::string_view value);
    // AuthenticationOk, the parameters, BackendKeyData with `client_key`, ReadyForQuery 'I'.
    [[nodiscard]] std::vector<std::byte> build(CancelKey client_key) const;
};

// Reads a new connection's answer to the StartupMessage, from bytes copied out of the
// upstream socket. Only the plain case is kept: AuthenticationOk without any exchange,
// ParameterStatus, a 12-byte BackendKeyData, ReadyForQuery 'I'. Anything else -- a password
// request, an error, a notice, NegotiateProtocolVersion -- is NotPoolable, and the bytes
// read so far go to the client as they are.
class GreetingReader {
  public:
    enum class Status { NeedMore, Complete, NotPoolable };
    // Largest greeting kept; a larger one is not pooled.
    static constexpr size_t kMaxSize = 64 * 1024;

    Status feed(std::span<const std::byte> bytes);
    [[nodiscard]] const ServerGreeting& greeting() const noexcept { return greeting_; }
    // Everything fed so far, unparsed.
    [[nodiscard]] std::vector<std::byte> take_bytes() noexcept { return buffer_.take(); }
    // After Complete: bytes fed beyond the ReadyForQuery (a pipelining client's answers).
    [[nodiscard]] std::span<const std::byte> rest() const noexcept { return buffer_.rest(); }
    // NotPoolable because Postgres refused the backend with SQLSTATE 53300: max_connections
    // or its reserved slots, a role's or a database's CONNECTION LIMIT.
    [[nodiscard]] bool too_many_connections() const noexcept { return too_many_connections_; }

  private:
    Status parse();

    MessageBuffer buffer_;
    bool authenticated_ = false;
    bool keyed_ = false;
    bool too_many_connections_ = false;
    Status status_ = Status::NeedMore;
    ServerGreeting greeting_;
};

// A BackendKeyData body's key: protocol 3.0's 8 bytes only (3.2's longer secret is not one
// l5pgd can hand out or map), else nothing.
[[nodiscard]] std::optional<CancelKey> parse_backend_key_data(std::span<const std::byte> body);

// Splits a ParameterStatus body into name and value; false if it is malformed.
[[nodiscard]] bool parse_parameter_status(std::span<const std::byte> body, std::string& name,
                                          std::string& value);

}  // namespace l5pg::protocol
