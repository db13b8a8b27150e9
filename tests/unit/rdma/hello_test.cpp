// Encoding and validation of the connection data exchanged at channel setup.
#include <array>

#include "test_util.hpp"
#include "transport/rdma/channel/hello.hpp"
#include "transport/rdma/channel/layout.hpp"
#include "transport/rdma/sys.hpp"

using namespace l5pg::rdma;
using namespace l5pg::rdma::test;

namespace {

Hello client_hello() {
    Hello h;
    h.role = HelloRole::Client;
    h.qp.kind = DeviceKind::Verbs;
    h.qp.qpn = 0x123456;
    h.qp.psn = 0xabcdef;
    h.qp.lid = 0x4321;
    h.qp.mtu = 5;
    for (uint8_t i = 0; i < 16; ++i)
        h.qp.gid[i] = static_cast<uint8_t>(0xf0 + i);
    h.area_addr = 0x7f0000001000;
    h.area_rkey = 0xdeadbeef;
    h.ring_size = 1 << 20;
    h.requested_ring_size = 1 << 16;
    return h;
}

Hello server_hello() {
    Hello h = client_hello();
    h.role = HelloRole::Server;
    h.requested_ring_size = 0;
    h.mailbox_addr = 0x7f0000900003;
    h.mailbox_rkey = 77;
    return h;
}

std::array<std::byte, kHelloSize> encode(const Hello& h) {
    std::array<std::byte, kHelloSize> bytes;
    encode_hello(h, bytes);
    return bytes;
}

std::string decode_error(std::span<const std::byte> bytes) {
    Hello out;
    std::string error;
    return decode_hello(bytes, out, error) ? "" : error;
}

}  // namespace

TEST_CASE("hello: client and server hellos round-trip", "[rdma][hello]") {
    for (const Hello& h : {client_hello(), server_hello()}) {
        const auto bytes = encode(h);
        Hello out;
        std::string error;
        REQUIRE(decode_hello(bytes, out, error));
        CHECK(out.role == h.role);
        CHECK(out.qp.kind == h.qp.kind);
        CHECK(out.qp.qpn == h.qp.qpn);
        CHECK(out.qp.psn == h.qp.psn);
        CHECK(out.qp.lid == h.qp.lid);
        CHECK(out.qp.mtu == h.qp.mtu);
        CHECK(out.qp.gid == h.qp.gid);
        CHECK(out.area_addr == h.area_addr);
        CHECK(out.area_rkey == h.area_rkey);
        CHECK(out.ring_size == h.ring_size);
        CHECK(out.requested_ring_size == h.requested_ring_size);
        CHECK(out.mailbox_addr == h.mailbox_addr);
        CHECK(out.mailbox_rkey == h.mailbox_rkey);
    }
    // Byte order is fixed (little-endian), whatever the host.
    const auto bytes = encode(client_hello());
    CHECK(bytes[0] == std::byte{'L'});
    CHECK(bytes[1] == std::byte{'5'});
    CHECK(bytes[8] == std::byte{0x56});
    CHECK(bytes[48] == std::byte{0xef});
}

TEST_CASE("hello: malformed hellos are refused with a reason", "[rdma][hello]") {
    auto with = [](Hello h, auto&& change) {
        change(h);
        return encode(h);
    };
    auto bytes = encode(client_hello());
    CHECK_THAT(decode_error(std::span(bytes).first(40)), Catch::Contains("wrong length"));
    bytes[0] = std::byte{0};
    CHECK_THAT(decode_error(bytes), Catch::Contains("magic"));
    bytes = encode(client_hello());
    bytes[4] = std::byte{9};
    CHECK_THAT(decode_error(bytes), Catch::Contains("version"));
    bytes = encode(client_hello());
    bytes[6] = std::byte{0};  // DeviceKind::Auto never goes on the wire
    CHECK_THAT(decode_error(bytes), Catch::Contains("device kind"));
    bytes = encode(client_hello());
    bytes[7] = std::byte{3};
    CHECK_THAT(decode_error(bytes), Catch::Contains("role"));
    bytes = encode(client_hello());
    bytes[36] = std::byte{1};
    CHECK_THAT(decode_error(bytes), Catch::Contains("reserved"));
    CHECK_THAT(decode_error(with(client_hello(), [](Hello& h) { h.qp.qpn = 1 << 24; })),
               Catch::Contains("24 bits"));
    CHECK_THAT(decode_error(with(client_hello(), [](Hello& h) { h.ring_size = 5000; })),
               Catch::Contains("ring size"));
    CHECK_THAT(decode_error(with(client_hello(), [](Hello& h) { h.ring_size = 1024; })),
               Catch::Contains("ring size"));
    CHECK_THAT(
        decode_error(with(client_hello(), [](Hello& h) { h.requested_ring_size = 3 << 20; })),
        Catch::Contains("requested ring size"));
    CHECK_THAT(decode_error(with(client_hello(), [](Hello& h) { h.area_addr = 0; })),
               Catch::Contains("area address"));
    CHECK_THAT(
        decode_error(with(client_hello(), [](Hello& h) { h.area_addr = UINT64_MAX - 4096; })),
        Catch::Contains("wraps"));
    CHECK_THAT(decode_error(with(client_hello(), [](Hello& h) { h.mailbox_addr = 8; })),
               Catch::Contains("no mailbox"));
    CHECK_THAT(decode_error(with(server_hello(), [](Hello& h) { h.mailbox_addr = 0; })),
               Catch::Contains("without a mailbox"));
    CHECK_THAT(decode_error(with(server_hello(), [](Hello& h) { h.requested_ring_size = 4096; })),
               Catch::Contains("requests no ring"));
}
