#include "transport/rdma/verbs/validate.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace l5pg::rdma::verbs {

bool validate_options(const DeviceOptions& o, std::string& error) {
    if (o.port < 1) {
        error = "rdma port must be at least 1 (ports are numbered from 1)";
        return false;
    }
    if (o.gid_index < -1 || o.gid_index > 255) {
        error = "rdma gid_index must be -1 (no GRH) or 0..255, got " + std::to_string(o.gid_index);
        return false;
    }
    if (o.timeout < 1 || o.timeout > 31) {
        error = "rdma timeout exponent must be 1..31 (0 would wait forever), got " +
                std::to_string(o.timeout);
        return false;
    }
    if (o.retry_count > 7) {
        error = "rdma retry_count must be 0..7, got " + std::to_string(o.retry_count);
        return false;
    }
    if (o.rnr_retry > 6) {
        error = "rdma rnr_retry must be 0..6 (7 would retry forever), got " +
                std::to_string(o.rnr_retry);
        return false;
    }
    if (o.max_inline > 4096) {
        error = "rdma max_inline must be at most 4096 bytes, got " + std::to_string(o.max_inline);
        return false;
    }
    return true;
}

std::string no_device_message(int err) {
    std::string text = "no RDMA device found";
    if (err == ENOSYS)
        text +=
            " (the kernel has no RDMA support loaded: no ib_uverbs, no NIC driver, no rdma_rxe)";
    else if (err != 0)
        text += std::string(" (ibv_get_device_list: ") + std::strerror(err) + ")";
    return text;
}

bool select_device(std::span<const std::string> available, std::string_view wanted, size_t& index,
                   std::string& error) {
    if (available.empty()) {
        error = no_device_message(0);
        return false;
    }
    if (wanted.empty()) {
        index = 0;
        return true;
    }
    const auto it = std::find(available.begin(), available.end(), wanted);
    if (it != available.end()) {
        index = static_cast<size_t>(it - available.begin());
        return true;
    }
    error = "RDMA device '" + std::string(wanted) + "' not found (available:";
    for (const std::string& name : available)
        error += " " + name;
    error += ")";
    return false;
}

bool validate_port(const PortInfo& port, const DeviceOptions& o, std::string& error) {
    if (o.port < 1 || o.port > port.port_count) {
        error = "rdma port " + std::to_string(o.port) +
                " does not exist (the device has ports 1.." + std::to_string(port.port_count) + ")";
        return false;
    }
    if (!port.active) {
        error = "rdma port " + std::to_string(o.port) + " is not active (state " + port.state_name +
                ")";
        return false;
    }
    if (port.ethernet && o.gid_index < 0) {
        error = "rdma port " + std::to_string(o.port) +
                " is Ethernet (RoCE): set gid_index (RoCE v2 entries usually have a non-zero "
                "index)";
        return false;
    }
    if (o.gid_index >= port.gid_table_length) {
        error = "rdma gid_index " + std::to_string(o.gid_index) + " is out of range (port " +
                std::to_string(o.port) + " has " + std::to_string(port.gid_table_length) +
                " GID entries)";
        return false;
    }
    return true;
}

bool validate_gid(const std::array<uint8_t, 16>& gid, const DeviceOptions& o, std::string& error) {
    if (o.gid_index < 0)
        return true;
    if (std::all_of(gid.begin(), gid.end(), [](uint8_t b) { return b == 0; })) {
        error = "rdma gid_index " + std::to_string(o.gid_index) + " on port " +
                std::to_string(o.port) + " is an empty GID table entry";
        return false;
    }
    return true;
}

}  // namespace l5pg::rdma::verbs
