// The configuration loader: YAML text and `-o key=value` overrides from the input (split at
// the first NUL: YAML before, overrides one per line or NUL after: argv holds no NUL). Only
// ConfigError may escape, with a message; anything else (a yaml-cpp exception, a crash) is a
// finding.
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "tests/fuzz/fuzz_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string input(reinterpret_cast<const char*>(data), size);
    const size_t nul = input.find('\0');
    const std::string yaml = input.substr(0, nul);
    std::vector<std::string> overrides;
    if (nul != std::string::npos) {
        std::string rest = input.substr(nul + 1);
        std::replace(rest.begin(), rest.end(), '\0', '\n');
        std::istringstream lines(rest);
        for (std::string line; std::getline(lines, line);)
            overrides.push_back(line);
    }
    try {
        (void)l5pg::config::load_from_string(yaml, overrides);
    } catch (const l5pg::config::ConfigError& e) {
        if (std::string(e.what()).empty())
            __builtin_trap();
    }
    return 0;
}
