#include "daemon/service_manager.hpp"

#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace l5pg::daemon {
namespace {

constexpr timeval kStatusEvery{1, 0};

}  // namespace

ServiceManager::ServiceManager(event_base* base, std::function<std::string()> status,
                               Responsive responsive)
    : notifier_(SystemdNotifier::from_environment()),
      status_(std::move(status)),
      responsive_(std::move(responsive)) {
    if (!notifier_.enabled())
        return;
    status_timer_.reset(event_new(base, -1, EV_PERSIST, status_cb, this));
    if (const auto interval = notifier_.watchdog_interval()) {
        watchdog_timer_.reset(event_new(base, -1, EV_PERSIST, watchdog_cb, this));
        spdlog::info("systemd watchdog: a ping every {} ms", interval->count() / 4000);
    }
}

void ServiceManager::ready() {
    if (!notifier_.enabled())
        return;
    last_status_ = status_();
    notifier_.send("READY=1\nSTATUS=" + last_status_);
    evtimer_add(status_timer_.get(), &kStatusEvery);
    if (watchdog_timer_) {
        const timeval quarter = to_timeval(*notifier_.watchdog_interval() / 4);
        notifier_.send("WATCHDOG=1");
        evtimer_add(watchdog_timer_.get(), &quarter);
    }
}

void ServiceManager::reloading() {
    notifier_.send(fmt::format("RELOADING=1\nMONOTONIC_USEC={}\nSTATUS=reloading the configuration",
                               monotonic_usec()));
}

void ServiceManager::reloaded() {
    if (!notifier_.enabled())
        return;
    last_status_ = status_();
    notifier_.send("READY=1\nSTATUS=" + last_status_);
}

void ServiceManager::stopping() {
    if (stopping_)
        return;
    stopping_ = true;
    if (status_timer_)
        evtimer_del(status_timer_.get());
    notifier_.send("STOPPING=1\nSTATUS=stopping");
}

void ServiceManager::status_cb(int, short, void* arg) {
    static_cast<ServiceManager*>(arg)->send_status();
}

void ServiceManager::send_status() {
    std::string status = status_();
    if (status == last_status_)
        return;
    if (notifier_.send("STATUS=" + status, /*routine=*/true))
        last_status_ = std::move(status);  // else tried again at the next tick
}

// Keeps pinging while stopping and draining too: a graceful shutdown may wait for sessions
// longer than WatchdogSec (the unit's ExecStop bounds the one `systemctl stop` begins; one
// begun by hand lasts until its sessions end).
void ServiceManager::watchdog_cb(int, short, void* arg) {
    // A stall of half of WatchdogSec stops the pings (at the next check, a quarter later at
    // most); systemd acts once the last ping is WatchdogSec old: after a stall of 1.25 to 1.5
    // times WatchdogSec.
    auto* self = static_cast<ServiceManager*>(arg);
    if (self->responsive_(*self->notifier_.watchdog_interval() / 2))
        (void)self->notifier_.send("WATCHDOG=1", /*routine=*/true);
}

}  // namespace l5pg::daemon
