// The soft device: RDMA semantics in user space over a stream socket, for hosts without
// an RDMA NIC (CI, development). It exists for correctness, not speed.
//
// What it guarantees, like an RC queue pair:
//  - a WRITE lands in the target's registered memory without the target application
//    running: the target device's thread applies it;
//  - requests of one QP are executed in order, each completely before the next, and the
//    last byte of a WRITE is stored last, with release semantics;
//  - READs return the target's memory; completions appear on the initiator's QP;
//  - the target checks rkey, range and access: a violation becomes an error completion
//    at the initiator, fails both QPs, and never touches memory outside the region;
//  - a signaled request without a response for soft_ack_timeout, or a closed or broken
//    socket, fails the QP: a dead peer never makes anyone wait forever;
//  - a failing QP makes the device's async_event_fd() readable, like a verbs async event.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "transport/rdma/device.hpp"
#include "transport/rdma/soft/failure_signal.hpp"
#include "transport/rdma/soft/wire_engine.hpp"

namespace l5pg::rdma::soft {

struct SoftConfig {
    bool scramble_writes = false;
    std::chrono::milliseconds ack_timeout{10000};
    uint32_t max_message = 64u << 20;
    uint32_t max_inline = 256;
    std::shared_ptr<FailureSignal> failures;  // notified when a QP of the device fails
    std::shared_ptr<WireEngine> engine;       // the device thread, serving every QP's wire
};

[[nodiscard]] std::unique_ptr<Device> open_soft_device(const DeviceOptions& options,
                                                       std::string& error);

}  // namespace l5pg::rdma::soft
