// Configuration reload (SIGHUP): the file and the -o overrides are read again, validated
// like at start (including the ident map and the TLS files), compared with the running
// configuration and, when valid, turned into the next Settings. Keys that need a restart
// (config/reload_keys.hpp) are named in the log and keep their running values; an
// invalid configuration is logged and changes nothing.
#pragma once

#include <string>
#include <vector>

#include "config/config.hpp"
#include "daemon/reload_ledger.hpp"
#include "daemon/settings.hpp"

namespace l5pg::daemon {

// Where the configuration comes from: what l5pgd was started with.
struct ConfigSource {
    std::string path;  // "" = defaults only
    std::vector<std::string> overrides;
};

// The settings to apply (every file read again), or null when the configuration is
// invalid. What is logged as an error or a warning is also put in `report`, for the admin
// console's RELOAD.
[[nodiscard]] SettingsPtr reload_settings(const ConfigSource& source, const Settings& running,
                                          ReloadLedger::Outcome& report);

// What no worker holds: the log level of the process's logger.
void apply_process_settings(const config::Config& config);

}  // namespace l5pg::daemon
