#include "transport/rdma/device.hpp"

#include "transport/rdma/soft/soft_device.hpp"
#include "transport/rdma/verbs/verbs_device.hpp"

namespace l5pg::rdma {

const char* to_string(DeviceKind kind) noexcept {
    switch (kind) {
        case DeviceKind::Auto:
            return "auto";
        case DeviceKind::Verbs:
            return "verbs";
        case DeviceKind::Soft:
            return "soft";
    }
    return "unknown";
}

bool parse_device_kind(std::string_view text, DeviceKind& kind) noexcept {
    for (DeviceKind k : {DeviceKind::Auto, DeviceKind::Verbs, DeviceKind::Soft}) {
        if (text == to_string(k)) {
            kind = k;
            return true;
        }
    }
    return false;
}

const char* to_string(WcStatus status) noexcept {
    switch (status) {
        case WcStatus::Success:
            return "success";
        case WcStatus::LocalProtectionError:
            return "local protection error";
        case WcStatus::RemoteAccessError:
            return "remote access error";
        case WcStatus::RemoteInvalidRequest:
            return "remote invalid request";
        case WcStatus::RetryExceeded:
            return "retry exceeded (peer not responding)";
        case WcStatus::Flushed:
            return "flushed (queue pair failed earlier)";
        case WcStatus::TransportError:
            return "transport error";
    }
    return "unknown";
}

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
