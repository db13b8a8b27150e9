// Hardware-free checks for the verbs device: option ranges, device selection and port /
// GID validation against attributes queried from the device. Pure functions over plain
// structs, so they are unit tested on hosts without an RDMA NIC.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "transport/rdma/device.hpp"

namespace l5pg::rdma::verbs {

// What open_verbs_device learned about the chosen port (from ibv_query_device/_port).
struct PortInfo {
    uint8_t port_count = 0;  // ibv_device_attr::phys_port_cnt
    bool active = false;     // port state IBV_PORT_ACTIVE
    const char* state_name = "";
    bool ethernet = false;  // link layer Ethernet: RoCE, needs a GID
    int gid_table_length = 0;
};

// Ranges of everything in DeviceOptions that needs no device: port >= 1, gid_index
// -1..255, timeout 1..31, retry_count 0..7, rnr_retry 0..6, max_inline <= 4096.
[[nodiscard]] bool validate_options(const DeviceOptions& options, std::string& error);

// Picks `wanted` (or the first device when empty) from the names ibv_get_device_list
// returned. Errors: no devices at all ("no RDMA device found"), unknown name (lists the
// available ones).
[[nodiscard]] bool select_device(std::span<const std::string> available, std::string_view wanted,
                                 size_t& index, std::string& error);

// The reason text when ibv_get_device_list() finds nothing; `err` is its errno (ENOSYS:
// no RDMA support in the kernel, 0: none found).
[[nodiscard]] std::string no_device_message(int err);

[[nodiscard]] bool validate_port(const PortInfo& port, const DeviceOptions& options,
                                 std::string& error);

// A GID table entry that is all zeros is unused.
[[nodiscard]] bool validate_gid(const std::array<uint8_t, 16>& gid, const DeviceOptions& options,
                                std::string& error);

}  // namespace l5pg::rdma::verbs
