// The connection data each side of an RDMA channel sends the other once, over the
// session socket (or embedded in the L5 upgrade request/answer): its queue pair
// endpoint, its area (where the peer writes), and for the server the client's mailbox
// byte. Fixed size, little-endian; byte offsets in transport/rdma/README.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "transport/rdma/device.hpp"

namespace l5pg::rdma {

inline constexpr size_t kHelloSize = 88;
inline constexpr uint32_t kHelloMagic = 0x4452354c;  // "L5RD" little-endian
inline constexpr uint16_t kHelloVersion = 1;

enum class HelloRole : uint8_t { Client = 1, Server = 2 };

struct Hello {
    HelloRole role = HelloRole::Client;
    QpEndpoint qp;
    // The sender's area: AreaControl + ring of ring_size bytes, writable (and readable)
    // by the receiver with area_rkey.
    uint64_t area_addr = 0;
    uint32_t area_rkey = 0;
    uint64_t ring_size = 0;
    // Client: the size it asks for its client->server ring. Server: 0.
    uint64_t requested_ring_size = 0;
    // Server: the client's mailbox byte. Client: 0.
    uint64_t mailbox_addr = 0;
    uint32_t mailbox_rkey = 0;
};

void encode_hello(const Hello& hello, std::span<std::byte, kHelloSize> out) noexcept;
// Structural checks: magic, version, role, device kind, ring sizes (powers of two in
// range), no address range that wraps, mailbox present exactly for the server. Whether
// the kinds match the local device is the caller's check.
[[nodiscard]] bool decode_hello(std::span<const std::byte> in, Hello& hello, std::string& error);

}  // namespace l5pg::rdma
