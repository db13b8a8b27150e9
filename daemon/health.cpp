#include "daemon/health.hpp"

#include <fmt/format.h>

namespace l5pg::daemon {

namespace {

int64_t whole_seconds(Health::clock::duration d) {
    return std::chrono::duration_cast<std::chrono::seconds>(d).count();
}

std::string stalled(std::string_view what, Health::clock::duration idle) {
    return fmt::format("{} has not gone round its event loop for {} s (limit {} s)", what,
                       whole_seconds(idle), whole_seconds(Health::kStallLimit));
}

}  // namespace

void Health::started(clock::time_point now) noexcept {
    main_seen_.store(ticks(now), std::memory_order_relaxed);
    laggard_seen_.store(ticks(now), std::memory_order_relaxed);
    started_.store(true, std::memory_order_release);
}

void Health::beat(clock::time_point now, clock::time_point laggard_seen, int laggard) noexcept {
    laggard_seen_.store(ticks(laggard_seen), std::memory_order_relaxed);
    laggard_.store(laggard, std::memory_order_relaxed);
    main_seen_.store(ticks(now), std::memory_order_relaxed);
}

void Health::draining() noexcept {
    draining_.store(true, std::memory_order_relaxed);
}

void Health::stopping(clock::time_point now, clock::duration workers_may_take) noexcept {
    stop_began_.store(ticks(now), std::memory_order_relaxed);
    stop_allowed_.store((workers_may_take + kStallLimit).count(), std::memory_order_relaxed);
    stopping_.store(true, std::memory_order_release);
}

void Health::joining(int index) noexcept {
    joining_.store(index, std::memory_order_relaxed);
}

Health::Verdict Health::liveness(clock::time_point now) const {
    if (!started_.load(std::memory_order_acquire)) {
        if (now - created_ > kStallLimit)  // stuck before listening (a device, a bind)
            return {false, fmt::format("still starting after {} s (limit {} s)",
                                       whole_seconds(now - created_), whole_seconds(kStallLimit))};
        return {true, "ok (starting)"};
    }
    if (stopping_.load(std::memory_order_acquire)) {
        const clock::duration stopping_for =
            now - clock::time_point(clock::duration(stop_began_.load(std::memory_order_relaxed)));
        const clock::duration allowed(stop_allowed_.load(std::memory_order_relaxed));
        if (stopping_for <= allowed)
            return {true, "ok (stopping)"};
        const int joining = joining_.load(std::memory_order_relaxed);
        return {false, fmt::format("stopping for {} s (limit {} s): {}",
                                   whole_seconds(stopping_for), whole_seconds(allowed),
                                   joining < 0 ? "the main thread has not finished stopping"
                                               : fmt::format("worker {} has not ended", joining))};
    }
    const clock::duration main_idle =
        now - clock::time_point(clock::duration(main_seen_.load(std::memory_order_relaxed)));
    if (main_idle > kStallLimit)
        return {false, stalled("the main thread", main_idle)};
    const clock::duration worker_idle =
        now - clock::time_point(clock::duration(laggard_seen_.load(std::memory_order_relaxed)));
    if (worker_idle > kStallLimit)
        return {false, stalled(fmt::format("worker {}", laggard_.load(std::memory_order_relaxed)),
                               worker_idle)};
    return {true, draining_.load(std::memory_order_relaxed) ? "ok (draining)" : "ok"};
}

Health::Verdict Health::readiness(clock::time_point now) const {
    Verdict live = liveness(now);
    if (!live.ok)
        return live;
    if (!started_.load(std::memory_order_acquire))
        return {false, "starting"};
    if (stopping_.load(std::memory_order_relaxed))
        return {false, "stopping"};
    if (draining_.load(std::memory_order_relaxed))
        return {false, "draining: new sessions are refused"};
    return {true, "ok"};
}

}  // namespace l5pg::daemon
