#include "protocol/version_negotiation.hpp"

#include <algorithm>
#include <string_view>

#include "protocol/backend_messages.hpp"

namespace l5pg::protocol {

namespace {

// Protocol options are the parameters named "_pq_.<option>"; l5pgd forwards none of them.
bool is_protocol_option(const std::pair<std::string, std::string>& parameter) {
    return parameter.first.starts_with("_pq_.");
}

}  // namespace

std::optional<ProtocolDowngrade> downgrade_to_3_0(const StartupPacket& packet) {
    // Nearly every client: nothing to copy.
    if (packet.code == kProtocolVersion3 &&
        std::none_of(packet.parameters.begin(), packet.parameters.end(), is_protocol_option))
        return std::nullopt;
    std::vector<std::pair<std::string, std::string>> kept;
    std::vector<std::string_view> options;
    for (const auto& parameter : packet.parameters) {
        if (is_protocol_option(parameter))
            options.push_back(parameter.first);
        else
            kept.push_back(parameter);
    }
    BackendWriter negotiate;
    negotiate.negotiate_protocol_version(kProtocolVersion3, options);
    return ProtocolDowngrade{negotiate.take(), build_startup_message(kept)};
}

}  // namespace l5pg::protocol
