// Whether a waiter's spinning takes a CPU that others need while no other CPU is free: the
// contention signal of the spin phases (issue 16; docs/performance.md, "Crowded CPUs").
//
// Spinning for a peer pays while there is a CPU to spare, and costs when the threads queued
// behind the spinner (backends, the worker, other clients) have work to do and nowhere else
// to run. The kernel keeps, per thread, the time it ran and the time it was runnable but
// waited for a CPU (/proc/thread-self/schedstat, kept without CONFIG_SCHEDSTATS too), and,
// per host, the time CPUs were idle (/proc/uptime). Measured on 2 vCPUs, point reads over
// SHM in the default placement: a lone client's spinning threads wait 5-8 % of their run
// time, with 2 to 8 clients 100-480 %.
//
// The gauge judges windows of kWindow while spinning is allowed. A window is crowded when
// the thread waited for a CPU more than half as long as it ran *and* the host's CPUs were
// idle less than a quarter of the window: waits then block at once for a back-off period
// (doubling while crowded, up to kMaxBackoff), then spinning is tried for a window again.
// The idle condition is the way out of the state blocking itself creates: a thread that
// blocks is woken on its waker's CPU, so a lone client and its worker that blocked once
// share one CPU, each waiting behind the other as if crowded, while the other CPU is idle.
// Spinning again then lets the load balancer move one of them to the idle CPU.
//
// And blocking must earn its keep: with RateCheck::On (one call of crowded() per wait, as in
// the shim) the gauge compares the waits per second of each back-off with those of the
// crowded window before it. When blocking served fewer, spinning is crowded but still the
// better choice, and the gauge leaves it alone for a while (1 s, doubling up to 8 s).
//
// What the gauge cannot see is whether the threads queued behind the spinner are other
// spinners (spinning pays) or threads with work (it does not); callers therefore leave it
// out where spinning was measured to win while crowded (see session_policy.hpp, and
// daemon/worker.cpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace l5pg::wait {

// One reading, in ns: the calling thread's time on a CPU and runnable without one, and the
// idle time of all the host's CPUs together (10 ms resolution).
struct SchedTimes {
    uint64_t run_ns = 0;
    uint64_t delay_ns = 0;
    uint64_t host_idle_ns = 0;
};

// Reads /proc/thread-self/schedstat and /proc/uptime with raw system calls (the shim must
// not go through its own interposed open/read/close), keeping errno. nullopt when /proc is
// not mounted or a file is not what we expect.
[[nodiscard]] std::optional<SchedTimes> read_sched_times() noexcept;

// "run_ns delay_ns timeslices\n" (schedstat): sets run_ns and delay_ns.
[[nodiscard]] bool parse_schedstat(const char* text, size_t size, SchedTimes& times) noexcept;
// "uptime.cc idle.cc\n" (/proc/uptime, seconds with two decimals): sets host_idle_ns.
[[nodiscard]] bool parse_uptime_idle(const char* text, size_t size, SchedTimes& times) noexcept;

// One per waiting thread (thread_local in the shim, a member of each l5pgd worker); not
// thread-safe.
class CrowdingGauge {
  public:
    using clock = std::chrono::steady_clock;
    static constexpr clock::duration kWindow = std::chrono::milliseconds(16);
    static constexpr clock::duration kMinBackoff = std::chrono::milliseconds(16);
    static constexpr clock::duration kMaxBackoff = std::chrono::milliseconds(128);
    static constexpr clock::duration kMinRespite = std::chrono::seconds(1);
    static constexpr clock::duration kMaxRespite = std::chrono::seconds(8);
    // A window in which the thread ran less than this (it mostly slept) tells nothing.
    static constexpr uint64_t kMinRunNs = 200'000;

    enum class RateCheck { Off, On };
    explicit constexpr CrowdingGauge(RateCheck check) noexcept : rate_check_(check) {}

    // True when a wait starting at `now` should block at once. `read` returns
    // std::optional<SchedTimes> (read_sched_times in production); called only at window
    // boundaries, about every kWindow while spinning.
    template <class Read>
    [[nodiscard]] bool crowded(clock::time_point now, Read&& read) noexcept {
        if (state_ == State::Unavailable)
            return false;
        ++calls_;
        if (state_ == State::BackingOff) {
            if (now < backoff_until_)
                return true;
            end_backoff(now);
        } else if (state_ == State::Window && now - window_start_ < kWindow) {
            return false;
        }
        const std::optional<SchedTimes> times = read();
        if (!times) {
            state_ = State::Unavailable;  // no /proc (or an unexpected format): spin as configured
            return false;
        }
        const bool judged = state_ == State::Window;
        const bool verdict = judged && now >= respite_until_ && is_crowded(*times, now);
        if (judged)
            last_window_ = {calls_, now - window_start_};
        // The next window starts here; after a back-off, when the back-off has ended.
        base_ = *times;
        window_start_ = now;
        calls_ = 0;
        state_ = verdict ? State::BackingOff : State::Window;
        if (verdict) {
            backoff_ = std::clamp(2 * backoff_, kMinBackoff, kMaxBackoff);
            backoff_until_ = now + backoff_;
        } else if (judged) {
            backoff_ = clock::duration::zero();
        }
        return verdict;
    }

    // True from a crowded verdict until a window is judged uncrowded again (through the
    // back-offs and the spinning windows between them).
    [[nodiscard]] bool crowded_lately() const noexcept {
        return backoff_ != clock::duration::zero();
    }

  private:
    struct Period {
        int64_t calls = 0;
        clock::duration length{};
        [[nodiscard]] double rate() const noexcept {
            const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(length).count();
            return ns > 0 ? static_cast<double>(calls) / static_cast<double>(ns) : 0.0;
        }
    };

    [[nodiscard]] bool is_crowded(const SchedTimes& times, clock::time_point now) const noexcept {
        const uint64_t run = times.run_ns - base_.run_ns;
        const uint64_t delay = times.delay_ns - base_.delay_ns;
        const uint64_t idle = times.host_idle_ns - base_.host_idle_ns;
        const auto wall = static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(now - window_start_).count());
        return run >= kMinRunNs && 2 * delay > run && 4 * idle < wall;
    }

    // The back-off that began at window_start_ is over: when it served fewer waits per
    // second than the crowded window before it, give spinning a respite from our verdicts.
    void end_backoff(clock::time_point now) noexcept {
        if (rate_check_ == RateCheck::Off)
            return;
        const Period blocked{calls_, now - window_start_};
        // Both periods last kMinBackoff or more, but either may have run for hours (an
        // idle session): rates as doubles, where products of counts and ns could overflow.
        const bool paid = blocked.rate() >= last_window_.rate();
        if (paid) {
            respite_ = clock::duration::zero();
            return;
        }
        respite_ = std::clamp(2 * respite_, kMinRespite, kMaxRespite);
        respite_until_ = now + respite_;
    }

    RateCheck rate_check_;
    clock::time_point window_start_{};  // of the current window or back-off
    clock::time_point backoff_until_{};
    clock::time_point respite_until_{};
    clock::duration backoff_{};
    clock::duration respite_{};
    Period last_window_{};  // the last judged window: calls and length
    int64_t calls_ = 0;     // since window_start_
    SchedTimes base_{};     // at window_start_
    // Start: nothing read yet. Window: judging the one that began at window_start_.
    // BackingOff: blocking until backoff_until_. Unavailable: no /proc, the gauge is mute.
    enum class State : uint8_t { Start, Window, BackingOff, Unavailable };
    State state_ = State::Start;
};

}  // namespace l5pg::wait
