#include "transport/rdma/soft/wire_engine.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>

namespace l5pg::rdma::soft {

std::shared_ptr<WireEngine> WireEngine::create(std::chrono::milliseconds scan_every, bool driven,
                                               std::string& error) {
    sys::UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll.valid()) {
        error = sys::errno_text("soft device: epoll_create1", errno);
        return nullptr;
    }
    sys::UniqueFd kick(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!kick.valid()) {
        error = sys::errno_text("soft device: eventfd", errno);
        return nullptr;
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kKickToken;
    if (sys::epoll_ctl_raw(epoll.get(), EPOLL_CTL_ADD, kick.get(), &ev) != 0) {
        error = sys::errno_text("soft device: epoll_ctl", errno);
        return nullptr;
    }
    return std::make_shared<WireEngine>(std::move(epoll), std::move(kick), scan_every, driven);
}

WireEngine::WireEngine(sys::UniqueFd epoll, sys::UniqueFd kick,
                       std::chrono::milliseconds scan_every, bool driven)
    : epoll_(std::move(epoll)),
      kick_(std::move(kick)),
      scan_every_(
          std::clamp(scan_every, std::chrono::milliseconds(1), std::chrono::milliseconds(1000))),
      driven_(driven),
      next_scan_(Clock::now() + scan_every_) {}

WireEngine::~WireEngine() {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    wake();
    thread_.join();
}

uint64_t WireEngine::add(int wire, WireHandler& handler, std::string& error) {
    std::lock_guard lock(mutex_);
    if (!driven_ && !started_) {
        if (!thread_.start([this] { run(); }, error)) {
            error = "soft device thread: " + error;
            return 0;
        }
        started_ = true;
    }
    const uint64_t token = next_token_++;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.u64 = token;
    if (sys::epoll_ctl_raw(epoll_.get(), EPOLL_CTL_ADD, wire, &ev) != 0) {
        error = sys::errno_text("soft device: epoll_ctl on the wire", errno);
        return 0;
    }
    handlers_.emplace(token, &handler);
    return token;
}

void WireEngine::remove(int wire, uint64_t token) noexcept {
    std::lock_guard lock(mutex_);
    // Events already collected for this token find no handler (tokens are never reused).
    (void)sys::epoll_ctl_raw(epoll_.get(), EPOLL_CTL_DEL, wire, nullptr);
    handlers_.erase(token);
}

void WireEngine::kick() noexcept {
    // Release before the eventfd write; the turn that the write wakes (the kernel orders
    // the two) reads the flag after its epoll_wait returned.
    settle_requested_.store(true, std::memory_order_release);
    wake();
}

void WireEngine::wake() noexcept {
    const uint64_t one = 1;
    (void)!::write(kick_.get(), &one, sizeof one);
}

void WireEngine::run() noexcept {
    std::array<epoll_event, 64> events;
    for (;;) {
        int timeout;
        {
            std::lock_guard lock(mutex_);
            if (stop_)
                return;
            timeout = round_timeout_ms(Clock::now());
        }
        const int n = sys::epoll_wait_raw(epoll_.get(), events.data(), events.size(), timeout);
        if (!handle(events.data(), std::max(n, 0)))  // n < 0: EINTR, signals are blocked here
            return;
    }
}

bool WireEngine::drive(int timeout_ms) noexcept {
    std::array<epoll_event, 64> events;
    bool leftover;
    {
        std::lock_guard lock(mutex_);
        leftover = !unfinished_.empty();
        timeout_ms = std::min(timeout_ms, round_timeout_ms(Clock::now()));
    }
    const int n = sys::epoll_wait_raw(epoll_.get(), events.data(), events.size(), timeout_ms);
    (void)handle(events.data(), std::max(n, 0));
    return n > 0 || leftover;
}

// Until the next scan of every handler, or 0 when some handler's input is left over.
int WireEngine::round_timeout_ms(Clock::time_point now) const noexcept {
    if (!unfinished_.empty())
        return 0;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next_scan_ - now);
    return static_cast<int>(std::max<int64_t>(left.count() + 1, 0));
}

bool WireEngine::handle(const epoll_event* events, int n) {
    std::lock_guard lock(mutex_);
    if (stop_)
        return false;
    dispatch(events, n);
    // A quarter interval early counts as due: a driven engine's owner calls on a timer of
    // the same interval, and a tick a little early must not postpone the scan by a whole
    // interval.
    const auto now = Clock::now();
    if (settle_requested_.exchange(false, std::memory_order_acq_rel) ||
        now + scan_every_ / 4 >= next_scan_) {
        settle_all();
        next_scan_ = now + scan_every_;
    }
    if (driven_ && !unfinished_.empty())
        wake();  // input left over: fd() stays readable, so the owner comes back at once
    return true;
}

void WireEngine::dispatch(const epoll_event* events, int n) {
    next_unfinished_.clear();
    for (int i = 0; i < n; ++i) {
        const uint64_t token = events[i].data.u64;
        if (token == kKickToken) {
            uint64_t count;
            (void)!::read(kick_.get(), &count, sizeof count);
            continue;
        }
        const auto it = handlers_.find(token);
        if (it != handlers_.end() && it->second->on_wire_event(events[i].events))
            next_unfinished_.push_back(token);
    }
    // Left over from last round: their input is still there, but edge-triggered epoll
    // does not report it again. (One reported again above just finds less to read.)
    for (const uint64_t token : unfinished_) {
        const auto it = handlers_.find(token);
        if (it != handlers_.end() && it->second->on_wire_event(EPOLLIN))
            next_unfinished_.push_back(token);
    }
    std::sort(next_unfinished_.begin(), next_unfinished_.end());
    next_unfinished_.erase(std::unique(next_unfinished_.begin(), next_unfinished_.end()),
                           next_unfinished_.end());
    unfinished_.swap(next_unfinished_);
}

void WireEngine::settle_all() noexcept {
    for (auto& [token, handler] : handlers_)
        handler->settle();
}

}  // namespace l5pg::rdma::soft
