// Who asked for a reload, and how the reloads went: the admin console's RELOAD answers
// with the outcome of a reload that began after it was asked (as PgBouncer's RELOAD answers
// once its reload ran), while the reload itself runs where SIGHUP's does, on the main thread.
//
// A console asks for a ticket, then sends SIGHUP; the main thread, before it reads the
// configuration, notes the tickets handed out so far (signals coalesce: one reload answers
// them all), and after it records the outcome and wakes the workers, whose consoles look
// whether their ticket is answered. Shared by the workers and the main thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace l5pg::daemon {

class ReloadLedger {
  public:
    struct Outcome {
        bool applied = false;  // the configuration was valid and is in force
        std::string error;     // why not, when not
        // What was logged as a warning: keys that need a restart, settings without effect
        std::vector<std::string> warnings;
    };

    // Any thread: a ticket for the next reload to begin.
    [[nodiscard]] uint64_t ask() {
        const std::lock_guard lock(mutex_);
        return ++asked_;
    }
    // Main thread, before the configuration is read: the tickets this reload answers.
    [[nodiscard]] uint64_t begin() const {
        const std::lock_guard lock(mutex_);
        return asked_;
    }
    // Main thread: the reload that answers tickets up to `answered` went so.
    void finish(uint64_t answered, Outcome outcome) {
        const std::lock_guard lock(mutex_);
        answered_ = answered;
        last_ = std::move(outcome);
    }
    // The outcome of the last reload that began after `ticket` was handed out, once there is
    // one (a later reload's, if several ran since: what is in force now).
    [[nodiscard]] std::optional<Outcome> outcome(uint64_t ticket) const {
        const std::lock_guard lock(mutex_);
        if (answered_ < ticket)
            return std::nullopt;
        return last_;
    }

  private:
    mutable std::mutex mutex_;
    uint64_t asked_ = 0;
    uint64_t answered_ = 0;
    Outcome last_;
};

}  // namespace l5pg::daemon
