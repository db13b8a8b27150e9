// One immutable snapshot of l5pgd's configuration and what is built from it (the auth rules
// with their ident map, the TLS context). A reload (SIGHUP, daemon/reload.cpp) builds a new
// snapshot and publishes it in the SettingsStore; each worker picks it up at a point where
// no session callback runs (Worker::refresh_settings), so a session never sees its
// configuration change in the middle of a callback, and an old snapshot lives on until the
// last thread holding it lets go.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "daemon/admission.hpp"

namespace l5pg::daemon {

struct Settings {
    // Throws std::runtime_error when the ident map or the TLS files cannot be loaded.
    explicit Settings(config::Config c) : config(std::move(c)), admission(config) {}
    Settings(const Settings&) = delete;
    Settings& operator=(const Settings&) = delete;

    // What start, --check and every reload warn of: settings without effect as the rest is
    // set, and ident rules that can never be used.
    [[nodiscard]] std::vector<std::string> warnings() const {
        std::vector<std::string> lines = config::settings_without_effect(config);
        const auto& ident = admission.ident.warnings();
        lines.insert(lines.end(), ident.begin(), ident.end());
        return lines;
    }

    const config::Config config;
    const Admission admission;  // refers to config: declared after it
};

using SettingsPtr = std::shared_ptr<const Settings>;

// The current snapshot. Thread-safe: the main thread publishes, workers read. The
// generation lets a worker's loop see a new snapshot with one atomic load per round and
// take the mutex only when there is one.
class SettingsStore {
  public:
    explicit SettingsStore(SettingsPtr initial) : current_(std::move(initial)) {}
    SettingsStore(const SettingsStore&) = delete;
    SettingsStore& operator=(const SettingsStore&) = delete;

    void publish(SettingsPtr next) {
        std::lock_guard lock(mutex_);
        current_ = std::move(next);
        generation_.fetch_add(1, std::memory_order_release);
    }
    [[nodiscard]] SettingsPtr current() const {
        std::lock_guard lock(mutex_);
        return current_;
    }
    [[nodiscard]] uint64_t generation() const noexcept {
        return generation_.load(std::memory_order_acquire);
    }

  private:
    mutable std::mutex mutex_;
    SettingsPtr current_;  // guarded by mutex_
    std::atomic<uint64_t> generation_{0};
};

}  // namespace l5pg::daemon
