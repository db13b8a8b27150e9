#include "transport/rdma/device.hpp"

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

}  // namespace l5pg::rdma
