#include "protocol/version_negotiation.hpp"

#include <string_view>

#include "protocol/backend_messages.hpp"

namespace l5pg::protocol {

std::optional<ProtocolDowngrade> downgrade_to_3_0(const StartupPacket& packet) {
    constexpr std::string_view kOptionPrefix = "_pq_.";
    std::vector<std::pair<std::string, std::string>> kept;
    std::vector<std::string_view> options;
    for (const auto& parameter : packet.parameters) {
        if (parameter.first.starts_with(kOptionPrefix))
            options.push_back(parameter.first);
        else
            kept.push_back(parameter);
    }
    if (packet.code == kProtocolVersion3 && options.empty())
        return std::nullopt;
    BackendWriter negotiate;
    negotiate.negotiate_protocol_version(kProtocolVersion3, options);
    return ProtocolDowngrade{negotiate.take(), build_startup_message(kept)};
}

}  // namespace l5pg::protocol
