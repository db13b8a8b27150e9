#include "transport/rdma/channel/hello.hpp"

#include "transport/rdma/channel/layout.hpp"
#include "transport/rdma/sys.hpp"

namespace l5pg::rdma {

using sys::get_le;
using sys::put_le;

void encode_hello(const Hello& h, std::span<std::byte, kHelloSize> out) noexcept {
    std::byte* p = out.data();
    put_le(p + 0, kHelloMagic, 4);
    put_le(p + 4, kHelloVersion, 2);
    put_le(p + 6, static_cast<uint8_t>(h.qp.kind), 1);
    put_le(p + 7, static_cast<uint8_t>(h.role), 1);
    put_le(p + 8, h.qp.qpn, 4);
    put_le(p + 12, h.qp.psn, 4);
    put_le(p + 16, h.qp.lid, 2);
    put_le(p + 18, h.qp.mtu, 1);
    put_le(p + 19, 0, 1);
    for (size_t i = 0; i < 16; ++i)
        p[20 + i] = static_cast<std::byte>(h.qp.gid[i]);
    put_le(p + 36, 0, 4);
    put_le(p + 40, h.area_addr, 8);
    put_le(p + 48, h.area_rkey, 4);
    put_le(p + 52, 0, 4);
    put_le(p + 56, h.ring_size, 8);
    put_le(p + 64, h.requested_ring_size, 8);
    put_le(p + 72, h.mailbox_addr, 8);
    put_le(p + 80, h.mailbox_rkey, 4);
    put_le(p + 84, 0, 4);
}

namespace {

bool fail(std::string& error, const char* what) {
    error = std::string("invalid RDMA hello: ") + what;
    return false;
}

}  // namespace

bool decode_hello(std::span<const std::byte> in, Hello& h, std::string& error) {
    if (in.size() != kHelloSize)
        return fail(error, "wrong length");
    const std::byte* p = in.data();
    if (get_le(p + 0, 4) != kHelloMagic)
        return fail(error, "bad magic");
    if (get_le(p + 4, 2) != kHelloVersion)
        return fail(error, "unsupported version");
    const auto kind = static_cast<uint8_t>(get_le(p + 6, 1));
    if (kind != static_cast<uint8_t>(DeviceKind::Verbs) &&
        kind != static_cast<uint8_t>(DeviceKind::Soft))
        return fail(error, "unknown device kind");
    const auto role = static_cast<uint8_t>(get_le(p + 7, 1));
    if (role != static_cast<uint8_t>(HelloRole::Client) &&
        role != static_cast<uint8_t>(HelloRole::Server))
        return fail(error, "unknown role");
    if (get_le(p + 19, 1) != 0 || get_le(p + 36, 4) != 0 || get_le(p + 52, 4) != 0 ||
        get_le(p + 84, 4) != 0)
        return fail(error, "reserved bytes set");
    h.qp.kind = static_cast<DeviceKind>(kind);
    h.role = static_cast<HelloRole>(role);
    h.qp.qpn = static_cast<uint32_t>(get_le(p + 8, 4));
    h.qp.psn = static_cast<uint32_t>(get_le(p + 12, 4));
    h.qp.lid = static_cast<uint16_t>(get_le(p + 16, 2));
    h.qp.mtu = static_cast<uint8_t>(get_le(p + 18, 1));
    for (size_t i = 0; i < 16; ++i)
        h.qp.gid[i] = static_cast<uint8_t>(p[20 + i]);
    h.area_addr = get_le(p + 40, 8);
    h.area_rkey = static_cast<uint32_t>(get_le(p + 48, 4));
    h.ring_size = get_le(p + 56, 8);
    h.requested_ring_size = get_le(p + 64, 8);
    h.mailbox_addr = get_le(p + 72, 8);
    h.mailbox_rkey = static_cast<uint32_t>(get_le(p + 80, 4));

    if (h.qp.qpn > 0xffffff || h.qp.psn > 0xffffff)
        return fail(error, "qpn or psn wider than 24 bits");
    if (!valid_ring_size(h.ring_size))
        return fail(error, "ring size is not a power of two between 4 KiB and 256 MiB");
    if (h.area_addr == 0 || h.area_addr > UINT64_MAX - kControlSize - h.ring_size)
        return fail(error, "area address missing or its range wraps");
    if (h.role == HelloRole::Client) {
        if (!valid_ring_size(h.requested_ring_size))
            return fail(error,
                        "requested ring size is not a power of two between 4 KiB and 256 MiB");
        if (h.mailbox_addr != 0 || h.mailbox_rkey != 0)
            return fail(error, "a client hello carries no mailbox");
    } else {
        if (h.requested_ring_size != 0)
            return fail(error, "a server hello requests no ring");
        if (h.mailbox_addr == 0 || h.mailbox_addr == UINT64_MAX)
            return fail(error, "server hello without a mailbox");
    }
    return true;
}

}  // namespace l5pg::rdma
