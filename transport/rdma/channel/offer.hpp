// The RDMA flavour of the L5 upgrade (docs/wire-format.md section 5), shared by l5pgd and
// the shim: l5pgd's offer ('R' + 24 bytes) after an upgrade request with transport 2,
// and the 24-byte greeting a client sends first on the soft device's wire connection.
// Pure encoding, no I/O; integers big-endian like the rest of the startup phase.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "transport/rdma/device.hpp"

namespace l5pg::rdma {

inline constexpr std::byte kOfferTag{'R'};
inline constexpr size_t kOfferSize = 24;      // after the 'R'
inline constexpr size_t kWireHelloSize = 24;  // first bytes on a soft wire connection
inline constexpr size_t kWireTokenSize = 16;
inline constexpr uint8_t kOfferVersion = 1;
inline constexpr uint32_t kWireHelloMagic = 0x4c355357;  // "L5SW"
inline constexpr uint32_t kWireHelloVersion = 1;

using WireToken = std::array<std::byte, kWireTokenSize>;

struct Offer {
    DeviceKind kind = DeviceKind::Soft;  // the server's device: the client must use the same
    uint16_t soft_port = 0;              // soft: TCP port for the wire connection
    WireToken token{};                   // soft: what the wire connection must present
};

namespace offer_detail {
inline void put_be(std::byte* p, uint64_t v, size_t n) noexcept {
    for (size_t i = 0; i < n; ++i)
        p[i] = static_cast<std::byte>(v >> (8 * (n - 1 - i)));
}
[[nodiscard]] inline uint64_t get_be(const std::byte* p, size_t n) noexcept {
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i)
        v = (v << 8) | static_cast<uint64_t>(p[i]);
    return v;
}
}  // namespace offer_detail

// | 0 | 1 | device kind (1 verbs, 2 soft) | 1 | 1 | version (1) | 2 | 2 | soft wire port |
// | 4 | 4 | reserved, 0 | 8 | 16 | wire token (soft; zero for verbs) |
inline void encode_offer(const Offer& offer, std::span<std::byte, kOfferSize> out) noexcept {
    using offer_detail::put_be;
    std::byte* p = out.data();
    put_be(p, static_cast<uint8_t>(offer.kind), 1);
    put_be(p + 1, kOfferVersion, 1);
    put_be(p + 2, offer.soft_port, 2);
    put_be(p + 4, 0, 4);
    for (size_t i = 0; i < kWireTokenSize; ++i)
        p[8 + i] = offer.token[i];
}

[[nodiscard]] inline bool decode_offer(std::span<const std::byte, kOfferSize> in,
                                       Offer& offer) noexcept {
    using offer_detail::get_be;
    const std::byte* p = in.data();
    const uint64_t kind = get_be(p, 1);
    if (get_be(p + 1, 1) != kOfferVersion || (kind != static_cast<uint8_t>(DeviceKind::Verbs) &&
                                              kind != static_cast<uint8_t>(DeviceKind::Soft)))
        return false;
    offer.kind = static_cast<DeviceKind>(kind);
    offer.soft_port = static_cast<uint16_t>(get_be(p + 2, 2));
    for (size_t i = 0; i < kWireTokenSize; ++i)
        offer.token[i] = p[8 + i];
    return offer.kind != DeviceKind::Soft || offer.soft_port != 0;
}

// | 0 | 4 | magic "L5SW" | 4 | 4 | version (1) | 8 | 16 | token from the offer |
inline void encode_wire_hello(const WireToken& token,
                              std::span<std::byte, kWireHelloSize> out) noexcept {
    using offer_detail::put_be;
    put_be(out.data(), kWireHelloMagic, 4);
    put_be(out.data() + 4, kWireHelloVersion, 4);
    for (size_t i = 0; i < kWireTokenSize; ++i)
        out[8 + i] = token[i];
}

[[nodiscard]] inline bool decode_wire_hello(std::span<const std::byte, kWireHelloSize> in,
                                            WireToken& token) noexcept {
    using offer_detail::get_be;
    if (get_be(in.data(), 4) != kWireHelloMagic || get_be(in.data() + 4, 4) != kWireHelloVersion)
        return false;
    for (size_t i = 0; i < kWireTokenSize; ++i)
        token[i] = in[8 + i];
    return true;
}

}  // namespace l5pg::rdma
