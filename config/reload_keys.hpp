// Which configuration keys a running l5pgd applies on reload (SIGHUP) and which need a
// restart, and what changed between two configurations. Pure code: daemon/reload.cpp
// logs and applies what it says.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"

namespace l5pg::config {

enum class Reload {
    Live,     // applied to the running l5pgd (to new sessions where a session holds it)
    Restart,  // bound at start: listeners, threads, devices; kept until a restart
};

struct KeyChange {
    std::string_view key;  // dotted, as in -o overrides
    std::string before;
    std::string after;
    Reload reload;
};

// Every key with how it reloads, in the order of config/l5pgd.example.yaml's sections.
[[nodiscard]] std::vector<std::pair<std::string_view, Reload>> reload_keys();

// The keys whose values differ between `running` and `loaded`.
[[nodiscard]] std::vector<KeyChange> diff(const Config& running, const Config& loaded);

// One key as the running l5pgd has it, its value and the default written as diff() writes
// values (strings quoted, so that an empty one shows).
struct KeySetting {
    std::string_view key;
    std::string value;
    std::string default_value;
    Reload reload;
};

// Every key of `running`, in the order of reload_keys(): the admin console's SHOW CONFIG.
[[nodiscard]] std::vector<KeySetting> settings_of(const Config& running);

// `loaded` with every Reload::Restart key set back to its value in `running`: what a
// reload applies.
[[nodiscard]] Config keep_restart_keys(const Config& running, Config loaded);

}  // namespace l5pg::config
