// PG v3 startup-phase packets: [int32 length incl. itself][int32 code][body].
// StartupMessage, SSLRequest, GSSENCRequest, CancelRequest and the L5 upgrade request.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "protocol/framing.hpp"

namespace l5pg::protocol {

// Postgres refuses startup packets longer than this: MAX_STARTUP_PACKET_LENGTH (10000) is
// the length without the length word itself.
inline constexpr uint32_t kMaxStartupPacketLength = 10000 + 4;
inline constexpr uint32_t kMinStartupPacketLength = 8;

inline constexpr uint32_t kProtocolVersion3 = 3u << 16;
inline constexpr uint32_t kCancelRequestCode = (1234u << 16) | 5678u;
inline constexpr uint32_t kSslRequestCode = (1234u << 16) | 5679u;
inline constexpr uint32_t kGssEncRequestCode = (1234u << 16) | 5680u;
// Unused by Postgres (which reserves 1234.xxxx for such requests): l5pgd's upgrade.
inline constexpr uint32_t kL5UpgradeRequestCode = (1234u << 16) | 5750u;

inline constexpr uint32_t kCancelRequestLength = 16;

// Postgres cuts a StartupMessage's user and database names to NAMEDATALEN - 1 bytes (63 in
// every packaged build), byte-wise, and serves the cut name: longer names that differ only
// beyond it name one role or database.
inline constexpr size_t kMaxNameBytes = 63;
[[nodiscard]] inline std::string_view postgres_name(std::string_view name) noexcept {
    return name.substr(0, kMaxNameBytes);
}

// ---- L5 upgrade request (see docs/wire-format.md) ----
enum class L5Transport : uint32_t { Shm = 1, Rdma = 2 };
inline constexpr uint32_t kL5UpgradeVersion = 1;
// length(4) code(4) version(4) transport(4) c2s_ring_size(8) s2c_ring_size(8)
inline constexpr uint32_t kL5UpgradeRequestLength = 32;
// l5pgd's one-byte answer.
inline constexpr std::byte kL5Accepted{'L'};
inline constexpr std::byte kL5Declined{'N'};

struct L5UpgradeRequest {
    uint32_t version = kL5UpgradeVersion;
    L5Transport transport = L5Transport::Shm;
    uint64_t c2s_ring_size = 0;
    uint64_t s2c_ring_size = 0;
};

enum class StartupKind { Startup, SslRequest, GssEncRequest, CancelRequest, L5Upgrade };

struct CancelKey {
    uint32_t backend_pid = 0;
    uint32_t secret = 0;
    friend bool operator==(const CancelKey&, const CancelKey&) = default;
};

struct StartupPacket {
    StartupKind kind = StartupKind::Startup;
    uint32_t length = 0;  // whole packet, as on the wire
    uint32_t code = 0;    // protocol version or request code
    std::vector<std::pair<std::string, std::string>> parameters;  // Startup only
    CancelKey cancel;                                             // CancelRequest only
    L5UpgradeRequest upgrade;                                     // L5Upgrade only
};

struct StartupParse {
    ParseStatus status = ParseStatus::NeedMore;
    size_t bytes_needed = 0;  // NeedMore: total bytes the packet needs (0 = unknown yet)
    StartupPacket packet;     // Ok
    std::string error;        // Invalid: a message fit for an ErrorResponse
    // Invalid: its SQLSTATE, as Postgres's: 0A000 for a protocol version or request code it
    // does not support, 08P01 for a malformed packet.
    std::string_view sqlstate;
};

// Parses one startup packet at the start of `buf` (a private copy: never shared memory).
// Invalid for lengths below 8 or above kMaxStartupPacketLength, unknown codes, protocol
// versions other than 3.x, malformed parameter lists and bodies of the wrong size.
[[nodiscard]] StartupParse parse_startup_packet(std::span<const std::byte> buf);

// Postgres's answer to a request code it does not take at this point of the startup (an
// unknown one, or an SSLRequest or GSSENCRequest after one was answered): FATAL 0A000
// "unsupported frontend protocol 1234.5679: server supports 3.0 to 3.0".
[[nodiscard]] StartupParse unsupported_protocol(uint32_t code);

// A StartupMessage's parameter, "" when absent.
[[nodiscard]] std::string_view startup_parameter(const StartupPacket& packet,
                                                 std::string_view name) noexcept;
// Whether it asks for a physical replication connection: `replication` true as Postgres's
// parse_bool reads it (true, yes, on, 1, and unique prefixes such as "t" or "ye", in any
// case); "database" asks for a logical one, which has a database.
[[nodiscard]] bool physical_replication(const StartupPacket& packet) noexcept;
// The database the login is for, as Postgres sets it: `database`, or the user's name when
// that is empty; none ("") for a physical replication connection.
[[nodiscard]] std::string_view login_database(const StartupPacket& packet) noexcept;

// Async-signal-safe check used by the shim on the cancel path: no allocation, no locks.
[[nodiscard]] bool is_cancel_request(std::span<const std::byte> buf) noexcept;
// Same for a complete StartupMessage header (length sane and version 3.x).
[[nodiscard]] bool is_startup_message(std::span<const std::byte> buf) noexcept;

[[nodiscard]] std::array<std::byte, kL5UpgradeRequestLength> build_l5_upgrade_request(
    const L5UpgradeRequest& req) noexcept;
[[nodiscard]] std::array<std::byte, kCancelRequestLength> build_cancel_request(
    CancelKey key) noexcept;
[[nodiscard]] std::vector<std::byte> build_startup_message(
    const std::vector<std::pair<std::string, std::string>>& parameters);

}  // namespace l5pg::protocol
