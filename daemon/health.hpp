// Whether l5pgd is alive and ready, for GET /healthz and /readyz (metrics_server.hpp): the
// main thread's heartbeat (Server::heartbeat_cb, every kBeatInterval) wakes each worker and
// notes when each was last seen going round its event loop (daemon/loop_rounds.hpp); the
// metrics thread reads what it noted. A loop stuck in one callback serves none of its
// sessions: beyond kStallLimit l5pgd is not alive, and a supervisor should restart it
// (the systemd watchdog does the same with WatchdogSec, daemon/service_manager.hpp).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace l5pg::daemon {

class Health {
  public:
    using clock = std::chrono::steady_clock;
    static constexpr clock::duration kBeatInterval = std::chrono::seconds(1);
    // Longer than any pass should take, shorter than the systemd watchdog's 30 s; a probe's
    // own failure threshold decides when a restart is worth the sessions it ends.
    static constexpr clock::duration kStallLimit = std::chrono::seconds(10);

    struct Verdict {
        bool ok = false;
        std::string text;  // one line: "ok", or what is wrong
    };

    // Main thread. `started` once the listeners accept; `beat` at each heartbeat with the
    // time the least recently seen worker was last seen going round (`now` with none);
    // `draining` at SIGINT (the listeners stay open and refuse with 57P03); `stopping` once
    // the main loop has ended (no more beats), with how long the workers may take to end
    // (their RDMA channels' last writes); `joining` while the main thread waits for worker
    // `index` to end (-1: none).
    void started(clock::time_point now) noexcept;
    void beat(clock::time_point now, clock::time_point laggard_seen, int laggard) noexcept;
    void draining() noexcept;
    void stopping(clock::time_point now, clock::duration workers_may_take) noexcept;
    void joining(int index) noexcept;

    // Any thread. Alive: every loop went round within kStallLimit (also while draining), or
    // l5pgd has been starting for less than kStallLimit, or stopping for less than the
    // workers may take plus kStallLimit (a worker that does not end then is stuck, and only
    // a kill ends l5pgd). Ready: alive, started,
    // neither draining nor stopping: l5pgd takes new sessions (whether it has room for one, or
    // Postgres answers, is not asked).
    [[nodiscard]] Verdict liveness(clock::time_point now) const;
    [[nodiscard]] Verdict readiness(clock::time_point now) const;

  private:
    [[nodiscard]] static int64_t ticks(clock::time_point t) noexcept {
        return t.time_since_epoch().count();
    }

    // Read one by one, not as a whole: a verdict is as of some instant within a beat.
    const clock::time_point created_ = clock::now();  // l5pgd's start, near enough
    std::atomic<bool> started_{false};
    std::atomic<bool> draining_{false};
    std::atomic<bool> stopping_{false};
    std::atomic<int64_t> main_seen_{0};     // the last heartbeat
    std::atomic<int64_t> laggard_seen_{0};  // the least recently seen worker, then
    std::atomic<int> laggard_{-1};          // its index
    std::atomic<int64_t> stop_began_{0};    // stopping(): when
    std::atomic<int64_t> stop_allowed_{0};  // ... and how long it may take (ticks)
    std::atomic<int> joining_{-1};          // the worker the main thread waits for
};

}  // namespace l5pg::daemon
