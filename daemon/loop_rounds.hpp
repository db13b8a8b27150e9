// Which workers went round their event loops since the last look (Worker::loop_rounds()),
// for the heartbeat (Server::heartbeat_cb) behind /healthz and the systemd watchdog.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "daemon/worker.hpp"

namespace l5pg::daemon {

class LoopRounds {
  public:
    // The indexes of the workers that did not go round since the last call (none at the
    // first: it takes the baseline). Wakes every worker, so that an idle one goes round
    // before the next call and only one stuck in a callback is named then.
    std::vector<size_t> stalled(const std::vector<std::unique_ptr<Worker>>& workers) {
        // No worker has gone round UINT64_MAX times.
        seen_.resize(workers.size(), std::numeric_limits<uint64_t>::max());
        std::vector<size_t> stuck;
        for (size_t i = 0; i < workers.size(); ++i) {
            const uint64_t rounds = workers[i]->loop_rounds();
            if (rounds == seen_[i])
                stuck.push_back(i);
            seen_[i] = rounds;
            workers[i]->wake();
        }
        return stuck;
    }

  private:
    std::vector<uint64_t> seen_;  // loop_rounds() at the last call
};

}  // namespace l5pg::daemon
