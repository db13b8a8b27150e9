// l5pgd's side of systemd's Type=notify contract (systemd/l5pgd.service), on the main
// thread's event loop: READY=1 once the listeners accept, RELOADING=1 / READY=1 around a
// reload, STOPPING=1, STATUS= with the session counts (refreshed every second while they
// change) and WATCHDOG=1 every quarter of WatchdogSec. The pings come from the main loop,
// and only while every worker's loop was seen going round within half of WatchdogSec: a
// thread stuck for 1.25 to 1.5 times WatchdogSec gets l5pgd restarted, one stuck for less
// than WatchdogSec never does.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "daemon/event_ptr.hpp"
#include "daemon/systemd_notify.hpp"

namespace l5pg::daemon {

class ServiceManager {
  public:
    using Responsive = std::function<bool(std::chrono::microseconds allowed_stall)>;
    // `status` describes the sessions for STATUS=; `responsive` says whether every worker went
    // round within `allowed_stall` (both called on the main thread).
    ServiceManager(event_base* base, std::function<std::string()> status, Responsive responsive);
    ServiceManager(const ServiceManager&) = delete;
    ServiceManager& operator=(const ServiceManager&) = delete;

    void ready();      // READY=1 and the first STATUS=; starts the timers
    void reloading();  // RELOADING=1 with MONOTONIC_USEC= (systemd >= 253 wants both)
    void reloaded();   // READY=1 again
    void stopping();   // STOPPING=1 (once); stops the status updates

  private:
    static void status_cb(int fd, short what, void* arg);
    static void watchdog_cb(int fd, short what, void* arg);
    void send_status();

    SystemdNotifier notifier_;
    std::function<std::string()> status_;
    Responsive responsive_;
    std::string last_status_;
    EventPtr status_timer_;
    EventPtr watchdog_timer_;
    bool stopping_ = false;
};

}  // namespace l5pg::daemon
