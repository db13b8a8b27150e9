// How to wake every worker thread (Worker::wake(), thread-safe), for state the workers share
// and each applies in its own loop (WorkerBulletin: RoomRequests, LostAddresses).
#pragma once

#include <functional>
#include <utility>
#include <vector>

namespace l5pg::daemon {

class WorkerWakers {
  public:
    // Before the workers run (each Worker's constructor); read only from then on.
    void add(std::function<void()> wake) { wakes_.push_back(std::move(wake)); }
    void wake_all() const {
        for (const auto& wake : wakes_)
            wake();
    }

  private:
    std::vector<std::function<void()>> wakes_;
};

}  // namespace l5pg::daemon
