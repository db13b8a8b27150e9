#include "daemon/reload.hpp"

#include <exception>
#include <optional>

#include <spdlog/spdlog.h>

#include "config/reload_keys.hpp"

namespace l5pg::daemon {
namespace {

void report_invalid(const std::exception& e, std::string& error) {
    error = e.what();
    spdlog::error("reload: invalid configuration, keeping the running one: {}", error);
}

std::optional<config::Config> load_again(const ConfigSource& source, std::string& error) {
    try {
        return config::load(source.path, source.overrides, config::EmptyFile::Refuse);
    } catch (const config::ConfigError& e) {
        report_invalid(e, error);
        return std::nullopt;
    }
}

void warn(std::string line, std::vector<std::string>& warnings) {
    spdlog::warn("reload: {}", line);
    warnings.push_back(std::move(line));
}

// Logs each changed key; true when at least one of them is applied.
bool log_changes(const std::vector<config::KeyChange>& changes,
                 std::vector<std::string>& warnings) {
    bool live = false;
    for (const config::KeyChange& change : changes) {
        if (change.reload == config::Reload::Restart) {
            warn(fmt::format("{} changed ({} -> {}) but needs a restart: keeping {}", change.key,
                             change.before, change.after, change.before),
                 warnings);
        } else {
            spdlog::info("reload: {}: {} -> {}", change.key, change.before, change.after);
            live = true;
        }
    }
    return live;
}

}  // namespace

SettingsPtr reload_settings(const ConfigSource& source, const Settings& running,
                            ReloadLedger::Outcome& report) {
    std::optional<config::Config> loaded = load_again(source, report.error);
    if (!loaded)
        return nullptr;
    const std::vector<config::KeyChange> changes = config::diff(running.config, *loaded);
    config::Config next = config::keep_restart_keys(running.config, std::move(*loaded));
    SettingsPtr settings;
    try {
        // Reads auth.ident_file and the tls.* files again even when no key changed: a
        // reload is how a renewed certificate or an edited ident map takes effect.
        settings = std::make_shared<const Settings>(std::move(next));
    } catch (const std::exception& e) {
        report_invalid(e, report.error);
        return nullptr;
    }
    if (!log_changes(changes, report.warnings))
        spdlog::info("reload: no key to apply; ident map and TLS files read again");
    for (const std::string& line : settings->warnings())
        warn(line, report.warnings);
    return settings;
}

void apply_process_settings(const config::Config& config) {
    spdlog::set_level(spdlog::level::from_str(config.logging.level));
}

}  // namespace l5pg::daemon
