// The ident map parser (auth.ident_file) and the client check that uses it.
#include <stdexcept>
#include <string>

#include "daemon/client_auth.hpp"
#include "daemon/ident_map.hpp"
#include "tests/fuzz/fuzz_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
        const auto map = l5pg::daemon::IdentMap::parse(text, "fuzz");
        const l5pg::config::AuthConfig cfg;
        const l5pg::daemon::AuthRequest request{true, 1000, "alice", "postgres"};
        const auto verdict = l5pg::daemon::check_client(cfg, map, request);
        // Only a rule naming exactly alice (or uid 1000) and postgres may admit this.
        if (verdict.allowed() && !map.allows("alice", "postgres") &&
            !map.allows("1000", "postgres"))
            __builtin_trap();
    } catch (const std::runtime_error&) {
    }
    return 0;
}
