// The soft device's one device thread: it waits in epoll on the wires of all the
// device's connected queue pairs and runs their target side (applying the peer's
// WRITEs, answering its READs) and the reception of responses.
//
// One thread per device rather than one per queue pair: with many busy queue pairs a
// single wake-up serves every wire that became readable meanwhile, where one thread per
// queue pair cost a context switch per wire per message (issue 17: with 8 clients the
// device threads' wake-ups were most of l5pgd's CPU per transaction).
//
// Who runs it: its own thread (the default), or -- "driven" -- the device's owner, which
// calls drive() when fd() is readable and at least every scan interval (l5pgd's worker:
// a wire event then wakes the worker itself, one context switch fewer per message than
// a device thread that applies the WRITE and leaves the worker to be woken after it).
// A queue pair's wait() drives a driven engine itself.
//
// Wires are registered edge-triggered: a handler reads its wire until EAGAIN (or until
// its turn's budget is spent, and is then called again next round without waiting), and
// writes wait for the EPOLLOUT edge that follows a short send.
#pragma once

#include <sys/epoll.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "transport/rdma/sys.hpp"

namespace l5pg::rdma::soft {

// What a queue pair does on the device thread. Called with the engine's lock held, so
// never at the same time as WireEngine::remove() of the same handler.
class WireHandler {
  public:
    virtual ~WireHandler() = default;
    // The wire has `events` (EPOLLIN, EPOLLOUT, ...). True when input is left that the
    // handler did not read this turn (its budget ran out): it is called again next round.
    [[nodiscard]] virtual bool on_wire_event(uint32_t events) noexcept = 0;
    // Periodically, and when kicked: flush, act on a failed send, check the ack timeout.
    virtual void settle() noexcept = 0;
};

class WireEngine {
  public:
    // `scan_every`: how often every handler's settle() runs without being asked (the
    // precision of the ack timeout).
    [[nodiscard]] static std::shared_ptr<WireEngine> create(std::chrono::milliseconds scan_every,
                                                            bool driven, std::string& error);
    ~WireEngine();
    WireEngine(const WireEngine&) = delete;
    WireEngine& operator=(const WireEngine&) = delete;

    // Starts watching `wire` for `handler` (starting the thread on first use). The
    // returned token names the registration; 0 on failure, with `error` set.
    [[nodiscard]] uint64_t add(int wire, WireHandler& handler, std::string& error);
    // After return, the device thread no longer calls the handler of `token`.
    void remove(int wire, uint64_t token) noexcept;
    // Every handler's settle() runs soon on the device thread (e.g. after a failed send).
    void kick() noexcept;

    // ---- driven engines
    [[nodiscard]] bool driven() const noexcept { return driven_; }
    // Readable when drive() has work.
    [[nodiscard]] int fd() const noexcept { return epoll_.get(); }
    [[nodiscard]] std::chrono::milliseconds scan_every() const noexcept { return scan_every_; }
    // One round: waits up to `timeout_ms` (>= 0; 0: not at all) for wire events and
    // handles them. True when there were any (or input left over from the last round).
    bool drive(int timeout_ms) noexcept;

    // Private, for make_shared.
    WireEngine(sys::UniqueFd epoll, sys::UniqueFd kick, std::chrono::milliseconds scan_every,
               bool driven);

  private:
    static constexpr uint64_t kKickToken = 0;

    using Clock = std::chrono::steady_clock;

    void wake() noexcept;  // makes fd() readable / ends the thread's epoll_wait
    void run() noexcept;
    [[nodiscard]] int round_timeout_ms(Clock::time_point now) const noexcept;
    // Handles the events of one epoll_wait(); false once stopping. Takes the lock.
    bool handle(const epoll_event* events, int n);
    void dispatch(const epoll_event* events, int n);
    void settle_all() noexcept;

    const sys::UniqueFd epoll_;
    const sys::UniqueFd kick_;  // eventfd: kick(), shutdown, a driven engine's leftover input
    // Set by kick(): the next turn settles every handler. Not by the wake-up a driven
    // engine gives itself for leftover input, which must not cost a scan per turn.
    std::atomic<bool> settle_requested_{false};
    const std::chrono::milliseconds scan_every_;
    const bool driven_;

    std::mutex mutex_;  // held by the device thread while it runs handlers
    std::unordered_map<uint64_t, WireHandler*> handlers_;
    uint64_t next_token_ = 1;
    bool started_ = false;  // the thread starts with the first queue pair
    bool stop_ = false;
    Clock::time_point next_scan_;
    std::vector<uint64_t> unfinished_;  // handlers whose input budget ran out last round
    std::vector<uint64_t> next_unfinished_;

    sys::Thread thread_;  // last member: joined before anything above is destroyed
};

}  // namespace l5pg::rdma::soft
