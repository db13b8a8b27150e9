// State shared by the verbs device, its protection domains and queue pairs. Every
// handle is a shared_ptr whose deleter calls the matching ibv_destroy/dealloc/close and
// keeps its parent alive, so no object can outlive what it was created from.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "transport/rdma/verbs/ibverbs.hpp"

namespace l5pg::rdma::verbs {

// Why a QP (or the whole device) stopped working. Set from completions and from async
// events, read by QueuePair::failed().
class FailureState {
  public:
    void set(std::string reason) {
        std::lock_guard lock(mutex_);
        if (failed_.load(std::memory_order_relaxed))
            return;
        reason_ = std::move(reason);
        failed_.store(true, std::memory_order_release);
    }
    [[nodiscard]] bool get(std::string* reason) const {
        if (!failed_.load(std::memory_order_acquire))
            return false;
        if (reason != nullptr) {
            std::lock_guard lock(mutex_);
            *reason = reason_;
        }
        return true;
    }

  private:
    std::atomic<bool> failed_{false};
    mutable std::mutex mutex_;
    std::string reason_;
};

struct VerbsConfig {
    const IbvApi* api = nullptr;  // loaded libibverbs; lives as long as the process
    std::shared_ptr<ibv_context> context;
    std::shared_ptr<FailureState> device_failure;  // IBV_EVENT_DEVICE_FATAL
    uint8_t port = 1;
    int gid_index = -1;
    std::array<uint8_t, 16> gid{};
    uint16_t lid = 0;
    ibv_mtu active_mtu = IBV_MTU_1024;
    uint32_t max_message = 0;  // port max_msg_sz
    uint32_t max_qp_wr = 0;
    uint8_t max_rd_atomic = 1;
    uint8_t timeout = 14;
    uint8_t retry_count = 7;
    uint8_t rnr_retry = 3;
    uint32_t max_inline = 64;
};

}  // namespace l5pg::rdma::verbs
