// Protocol version negotiation at startup (NegotiateProtocolVersion, PostgreSQL's
// "Protocol versions" section). Pure code, no I/O.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "protocol/startup.hpp"

namespace l5pg::protocol {

// l5pgd speaks protocol 3.0 without protocol options to Postgres, whatever the client asks
// for: it reads and issues 3.0's cancel keys (4-byte secrets; 3.2's are longer), and Postgres
// up to 17 knows no newer version anyway. A StartupMessage asking for a newer 3.x or carrying
// "_pq_." parameters gets what Postgres itself answers it: a NegotiateProtocolVersion with
// 3.0 and the options it does not know, before anything else; then the StartupMessage goes on
// as 3.0 without them. nullopt for a StartupMessage that is 3.0 and has no options already.
struct ProtocolDowngrade {
    std::vector<std::byte> negotiate;  // 'v', for the client
    std::vector<std::byte> startup;    // for Postgres
};
[[nodiscard]] std::optional<ProtocolDowngrade> downgrade_to_3_0(const StartupPacket& packet);

}  // namespace l5pg::protocol
