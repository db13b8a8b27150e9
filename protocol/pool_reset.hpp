// The reset a pooled server connection goes through before another client may use it
// (daemon/upstream_pool.hpp): DISCARD ALL (which also rolls back SET, SET SESSION AUTHORIZATION,
// prepared statements, portals, LISTEN, advisory locks, temporary tables, cached plans and
// sequences), then RESET ROLE (back to the role the login set, if any) and a query whose
// answer is a nonce only l5pgd knows. The reply must be
// exactly the two answers: output still due to the previous client (a query it smuggled
// past our count of its requests, say) cannot pass for them, and the connection is closed
// instead of reused. Pure code, no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "protocol/framing.hpp"
#include "protocol/server_greeting.hpp"

namespace l5pg::protocol {

class PoolReset {
  public:
    enum class Status { NeedMore, Done, Failed };

    explicit PoolReset(uint64_t nonce);
    // Two Query messages: DISCARD ALL, then RESET ROLE and SELECT of the nonce.
    [[nodiscard]] std::vector<std::byte> request() const;
    // Bytes copied from the upstream socket after the request was sent. ParameterStatus
    // reports (what DISCARD ALL changed back) update `greeting`. Bytes after the second
    // ReadyForQuery fail the reset.
    Status feed(std::span<const std::byte> bytes, ServerGreeting& greeting);

  private:
    Status parse(ServerGreeting& greeting);
    [[nodiscard]] bool expected(char type, std::span<const std::byte> body) const;

    std::string nonce_text_;
    MessageBuffer buffer_;
    size_t step_ = 0;  // index into the expected answer
    Status status_ = Status::NeedMore;
};

}  // namespace l5pg::protocol
