// The factory at the edge: the one place that knows the device implementations, so that
// the interface (device.cpp) and the channel above it never include soft/ or verbs/.
#include "transport/rdma/device.hpp"
#include "transport/rdma/soft/soft_device.hpp"
#include "transport/rdma/verbs/verbs_device.hpp"

namespace l5pg::rdma {

std::unique_ptr<Device> open_device(DeviceKind kind, const DeviceOptions& options,
                                    std::string& error) {
    switch (kind) {
        case DeviceKind::Soft:
            return soft::open_soft_device(options, error);
        case DeviceKind::Verbs:
            return verbs::open_verbs_device(options, error);
        case DeviceKind::Auto: {
            auto device = verbs::open_verbs_device(options, error);
            if (device == nullptr)
                error = "rdma device auto: no usable verbs device (" + error +
                        "); configure the soft device explicitly on hosts without an RDMA NIC";
            return device;
        }
    }
    error = "unknown RDMA device kind";
    return nullptr;
}

}  // namespace l5pg::rdma
