// The startup-phase packet parser (StartupMessage, SSL/GSS/cancel requests, L5 upgrade):
// the first bytes any client sends l5pgd.
#include "protocol/startup.hpp"
#include "protocol/version_negotiation.hpp"
#include "tests/fuzz/fuzz_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const auto in = l5pg::fuzz::bytes(data, size);
    const auto parse = l5pg::protocol::parse_startup_packet(in);
    if (parse.status == l5pg::protocol::ParseStatus::Ok) {
        // A packet that parses re-encodes to one that parses the same way.
        if (parse.packet.kind == l5pg::protocol::StartupKind::Startup) {
            const auto again = l5pg::protocol::parse_startup_packet(
                l5pg::protocol::build_startup_message(parse.packet.parameters));
            if (again.status != l5pg::protocol::ParseStatus::Ok ||
                again.packet.parameters != parse.packet.parameters)
                __builtin_trap();
            // What l5pgd forwards after negotiating a newer version down parses as 3.0.
            if (const auto downgrade = l5pg::protocol::downgrade_to_3_0(parse.packet)) {
                const auto forwarded = l5pg::protocol::parse_startup_packet(downgrade->startup);
                if (forwarded.status != l5pg::protocol::ParseStatus::Ok ||
                    forwarded.packet.code != l5pg::protocol::kProtocolVersion3 ||
                    l5pg::protocol::downgrade_to_3_0(forwarded.packet).has_value())
                    __builtin_trap();
            }
        }
    }
    (void)l5pg::protocol::is_cancel_request(in);
    (void)l5pg::protocol::is_startup_message(in);
    return 0;
}
