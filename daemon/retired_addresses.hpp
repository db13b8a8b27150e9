// Addresses upstream.host's answers no longer have (a failover by DNS), learned by any
// worker's lookup and shared by all: no server connection reached at one is kept, and those
// kept there are closed in every worker, each in its own loop once woken
// (Worker::close_retired()). An address back in a later answer is no longer retired.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/worker_wakers.hpp"

namespace l5pg::daemon {

class RetiredAddresses {
  public:
    explicit RetiredAddresses(const WorkerWakers& wakers) : wakers_(wakers) {}

    // A lookup's news (UpstreamAddress::bytes()): `gone` left the answer, `now` is in it.
    // The workers are woken when an address was retired. What is retired now.
    std::set<std::string> learn(const std::vector<std::string>& gone,
                                const std::vector<std::string>& now) {
        std::set<std::string> retired;
        {
            const std::lock_guard lock(mutex_);
            retired_.insert(gone.begin(), gone.end());
            for (const std::string& address : now)
                retired_.erase(address);  // back in the answer
            generation_.fetch_add(1, std::memory_order_relaxed);
            retired = retired_;
        }
        if (!gone.empty())
            wakers_.wake_all();
        return retired;
    }
    [[nodiscard]] bool contains(const std::string& address) const {
        const std::lock_guard lock(mutex_);
        return retired_.contains(address);
    }
    // What is retired, if it changed since `seen` (a worker's count, brought up to date).
    [[nodiscard]] std::optional<std::set<std::string>> changed_since(uint64_t& seen) const {
        if (generation_.load(std::memory_order_relaxed) == seen)
            return std::nullopt;  // every wake asks: no lock while nothing changed
        const std::lock_guard lock(mutex_);
        seen = generation_.load(std::memory_order_relaxed);
        return retired_;
    }
    // A reload pointed upstream.* elsewhere (settings generation `settings`): the addresses of
    // another name's answers go, once, whichever worker takes the reload up first.
    void forget_for(uint64_t settings) {
        const std::lock_guard lock(mutex_);
        if (settings <= forgotten_for_)
            return;
        forgotten_for_ = settings;
        retired_.clear();
        generation_.fetch_add(1, std::memory_order_relaxed);
    }

  private:
    const WorkerWakers& wakers_;
    mutable std::mutex mutex_;
    std::set<std::string> retired_;  // guarded by the mutex
    uint64_t forgotten_for_ = 0;     // guarded by the mutex
    // Changed under the mutex, read without it to skip the lock (a wake that follows a
    // change sees it: the eventfd's write and read order them).
    std::atomic<uint64_t> generation_{0};
};

}  // namespace l5pg::daemon
