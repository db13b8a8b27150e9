// The verbs device: rdma-core's libibverbs, RC queue pairs, one device context per
// Device. Connection setup is a raw QP exchange (QPN, PSN, LID, GID) carried by the
// channel's hello over the session socket; no rdma_cm.
#pragma once

#include <memory>
#include <string>

#include "transport/rdma/device.hpp"

namespace l5pg::rdma::verbs {

// Validates the options, lists the devices, opens the chosen one and checks the port
// and GID. Every failure (no device at all, unknown name, bad port, inactive port, GID
// index out of range or empty) comes back as nullptr with a message naming the cause.
[[nodiscard]] std::unique_ptr<Device> open_verbs_device(const DeviceOptions& options,
                                                        std::string& error);

}  // namespace l5pg::rdma::verbs
