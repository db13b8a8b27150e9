// Rate limit for a repeated log line: at most `burst` lines per interval, and the first
// line written after some were suppressed says how many, or, when none comes, a line of its
// own once the interval is over (take_unreported(), from the main thread's heartbeat): a
// flood of refused connections cannot fill the disk, and nothing is silently lost. A burst lets a
// few distinct events in a row all be seen, as printk_ratelimit does. Thread-safe: one limiter per
// kind of message may be shared by the acceptor and every worker.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace l5pg::daemon {

class LogLimiter {
  public:
    using clock = std::chrono::steady_clock;
    explicit LogLimiter(clock::duration interval = std::chrono::seconds(5), unsigned burst = 10)
        : interval_(interval), burst_(burst) {}
    LogLimiter(const LogLimiter&) = delete;
    LogLimiter& operator=(const LogLimiter&) = delete;

    // nullopt: do not log this one (a line at `level`). Otherwise log it, with the number
    // suppressed before.
    [[nodiscard]] std::optional<uint64_t> admit(
        clock::time_point now, spdlog::level::level_enum level = spdlog::level::warn) noexcept {
        std::lock_guard lock(mutex_);
        if (!started_ || now - window_start_ >= interval_) {
            started_ = true;
            window_start_ = now;
            logged_in_window_ = 0;
        }
        if (logged_in_window_ >= burst_) {
            ++suppressed_;
            suppressed_level_ = std::max(suppressed_level_, level);
            return std::nullopt;
        }
        ++logged_in_window_;
        return take_suppressed().count;
    }

    // How many were suppressed in an interval that is over, which no line has reported yet
    // (then reported: the next line says 0 more), and the highest level among them; nullopt
    // if none or the interval runs on.
    struct Unreported {
        uint64_t count = 0;
        spdlog::level::level_enum level = spdlog::level::trace;
    };
    [[nodiscard]] std::optional<Unreported> take_unreported(clock::time_point now) noexcept {
        std::lock_guard lock(mutex_);
        if (suppressed_ == 0 || now - window_start_ < interval_)
            return std::nullopt;
        return take_suppressed();
    }

    // Logs the formatted line at `level` if admit() lets it through (formatting only then),
    // followed by " (N similar messages not logged)" when some were suppressed.
    template <class... Args>
    void log(spdlog::level::level_enum level, fmt::format_string<Args...> format, Args&&... args) {
        const std::optional<uint64_t> suppressed = admit(clock::now(), level);
        if (!suppressed)
            return;
        std::string line = fmt::format(format, std::forward<Args>(args)...);
        if (*suppressed > 0)
            line += fmt::format(" ({} similar messages not logged)", *suppressed);
        spdlog::log(level, "{}", line);
    }

  private:
    // The count and level handed out with a line or a tail, and reset. Under mutex_.
    Unreported take_suppressed() noexcept {
        return {std::exchange(suppressed_, 0),
                std::exchange(suppressed_level_, spdlog::level::trace)};
    }

    std::mutex mutex_;
    const clock::duration interval_;
    const unsigned burst_;
    bool started_ = false;                                               // guarded by mutex_
    clock::time_point window_start_;                                     // guarded by mutex_
    unsigned logged_in_window_ = 0;                                      // guarded by mutex_
    uint64_t suppressed_ = 0;                                            // guarded by mutex_
    spdlog::level::level_enum suppressed_level_ = spdlog::level::trace;  // guarded by mutex_
};

// The log lines a client can cause at will (by connecting, sending garbage, failing
// authentication, asking for upgrades that are declined, timing out...), one limiter per
// kind so that a flood of one kind does not hide the others. Process-wide.
struct ClientLogLimits {
    LogLimiter refused_connection;  // a cap was reached before the startup was read
    LogLimiter startup_rejected;    // invalid startup packets
    LogLimiter auth_refused;        // l5pgd's client check said no
    LogLimiter upgrade_declined;    // SHM and RDMA upgrades declined
    LogLimiter upstream_failed;     // Postgres could not be reached for a client
    LogLimiter session_error;       // sessions closed for an error (timeouts, violations)
    LogLimiter soft_wire;           // soft RDMA wire connections dropped
    LogLimiter cancel_refused;      // CancelRequests not forwarded

    // Logs, for each kind, the count suppressed in an interval now over that no line of
    // its kind reported: the tail of a flood.
    void report_unlogged(LogLimiter::clock::time_point now) {
        const std::pair<LogLimiter*, const char*> kinds[] = {
            {&refused_connection, "connections refused before their startup"},
            {&startup_rejected, "invalid startup packets"},
            {&auth_refused, "logins refused"},
            {&upgrade_declined, "upgrades declined"},
            {&upstream_failed, "upstream connect failures"},
            {&session_error, "sessions closed for an error"},
            {&soft_wire, "soft RDMA wire connections dropped"},
            {&cancel_refused, "cancel requests not forwarded"},
        };
        for (const auto& [limiter, kind] : kinds)
            if (const std::optional<LogLimiter::Unreported> tail = limiter->take_unreported(now))
                spdlog::log(tail->level, "{} similar messages not logged since the last one ({})",
                            tail->count, kind);
    }
};

inline ClientLogLimits& client_logs() {
    static ClientLogLimits limits;
    return limits;
}

}  // namespace l5pg::daemon
