#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "protocol/error_response.hpp"
#include "protocol/framing.hpp"
#include "protocol/startup.hpp"
#include "protocol/version_negotiation.hpp"
#include "protocol/wire.hpp"

using Catch::Matchers::Contains;
using namespace l5pg::protocol;

namespace {

using Bytes = std::vector<std::byte>;
using Params = std::vector<std::pair<std::string, std::string>>;

void put32(Bytes& out, uint32_t v) {
    std::byte b[4];
    write_be32(b, v);
    out.insert(out.end(), b, b + 4);
}

void put_str(Bytes& out, std::string_view s, bool terminate = true) {
    for (const char c : s)
        out.push_back(static_cast<std::byte>(c));
    if (terminate)
        out.push_back(std::byte{0});
}

// A startup packet with the given code and raw body; the length field covers it all.
Bytes packet(uint32_t code, const Bytes& body) {
    Bytes out;
    put32(out, static_cast<uint32_t>(8 + body.size()));
    put32(out, code);
    out.insert(out.end(), body.begin(), body.end());
    return out;
}

// Just a length and a code, with `total` bytes in the buffer (zero padded).
Bytes header_only(uint32_t length, uint32_t code, size_t total = 8) {
    Bytes out;
    put32(out, length);
    put32(out, code);
    out.resize(std::max<size_t>(total, 8));
    return out;
}

Bytes message_header(char type, uint32_t length) {
    Bytes out{static_cast<std::byte>(type)};
    put32(out, length);
    return out;
}

std::string as_string(std::span<const std::byte> bytes) {
    return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// Splits an ErrorResponse body into (code, value) fields; checks the final terminator.
std::vector<std::pair<char, std::string>> error_fields(const Bytes& msg) {
    std::vector<std::pair<char, std::string>> fields;
    size_t pos = kMessageHeaderSize;
    while (pos < msg.size() && msg[pos] != std::byte{0}) {
        const char code = static_cast<char>(msg[pos++]);
        std::string value;
        while (pos < msg.size() && msg[pos] != std::byte{0})
            value.push_back(static_cast<char>(msg[pos++]));
        REQUIRE(pos < msg.size());  // every field is NUL-terminated
        ++pos;
        fields.emplace_back(code, std::move(value));
    }
    REQUIRE(pos + 1 == msg.size());  // the list terminator is the very last byte
    return fields;
}

}  // namespace

// ------------------------------------------------------------------------ wire

TEST_CASE("wire: big-endian round trips", "[protocol][wire]") {
    std::array<std::byte, 8> buf{};
    write_be32(buf.data(), 0x01020304u);
    CHECK(buf[0] == std::byte{1});
    CHECK(buf[3] == std::byte{4});
    CHECK(read_be32(buf.data()) == 0x01020304u);
    write_be64(buf.data(), 0x0102030405060708ull);
    CHECK(buf[0] == std::byte{1});
    CHECK(buf[7] == std::byte{8});
    CHECK(read_be64(buf.data()) == 0x0102030405060708ull);
    write_be32(buf.data(), 0xffffffffu);
    CHECK(read_be32(buf.data()) == 0xffffffffu);
}

// ---------------------------------------------------------------------- framing

TEST_CASE("framing: valid header parses", "[protocol][framing]") {
    Bytes buf = message_header('Q', 13);
    put_str(buf, "SELECT 1");
    const auto r = parse_message_header(buf);
    REQUIRE(r.status == ParseStatus::Ok);
    CHECK(r.header.type == 'Q');
    CHECK(r.header.length == 13);
    CHECK(r.header.total_size() == 14);
    CHECK(r.header.total_size() == buf.size());
    CHECK(r.error.empty());

    // Exactly 5 bytes suffice; the minimum length 4 (empty body) is fine.
    const auto min = parse_message_header(message_header('S', 4));
    REQUIRE(min.status == ParseStatus::Ok);
    CHECK(min.header.total_size() == 5);
}

TEST_CASE("framing: fewer than 5 bytes need more", "[protocol][framing]") {
    const Bytes full = message_header('Q', 100);
    for (size_t n = 0; n < kMessageHeaderSize; ++n) {
        INFO("prefix " << n);
        const auto r = parse_message_header(std::span(full).first(n));
        CHECK(r.status == ParseStatus::NeedMore);
    }
    CHECK(parse_message_header(full).status == ParseStatus::Ok);
}

TEST_CASE("framing: invalid lengths", "[protocol][framing]") {
    for (const uint32_t len : {0u, 1u, 2u, 3u}) {
        INFO("length " << len);
        const auto r = parse_message_header(message_header('Q', len));
        CHECK(r.status == ParseStatus::Invalid);
        CHECK_FALSE(r.error.empty());
    }
    // "Negative" int32 lengths are huge as uint32 and must not pass.
    for (const uint32_t len : {0xffffffffu, 0x80000000u, 0xfffffffcu, kMaxMessageLength + 1}) {
        INFO("length " << len);
        const auto r = parse_message_header(message_header('D', len));
        CHECK(r.status == ParseStatus::Invalid);
        CHECK_FALSE(r.error.empty());
    }
    CHECK(parse_message_header(message_header('D', kMaxMessageLength)).status == ParseStatus::Ok);
}

TEST_CASE("framing: custom limit", "[protocol][framing]") {
    CHECK(parse_message_header(message_header('d', 8192), 8192).status == ParseStatus::Ok);
    const auto r = parse_message_header(message_header('d', 8193), 8192);
    CHECK(r.status == ParseStatus::Invalid);
    CHECK_FALSE(r.error.empty());
    CHECK(parse_message_header(message_header('d', 4), 4).status == ParseStatus::Ok);
    CHECK(parse_message_header(message_header('d', 5), 4).status == ParseStatus::Invalid);
    // A limit below 4 still rejects short lengths.
    CHECK(parse_message_header(message_header('d', 3), 100).status == ParseStatus::Invalid);
}

// ---------------------------------------------------------------------- startup

TEST_CASE("startup: StartupMessage round trip", "[protocol][startup]") {
    const Params params{{"user", "alice"},
                        {"database", "db1"},
                        {"application_name", ""},
                        {"options", "-c search_path=public"}};
    const Bytes msg = build_startup_message(params);
    REQUIRE(msg.size() >= 8);
    CHECK(read_be32(msg.data()) == msg.size());
    CHECK(read_be32(msg.data() + 4) == kProtocolVersion3);
    CHECK(msg.back() == std::byte{0});

    const auto r = parse_startup_packet(msg);
    REQUIRE(r.status == ParseStatus::Ok);
    CHECK(r.error.empty());
    CHECK(r.packet.kind == StartupKind::Startup);
    CHECK(r.packet.length == msg.size());
    CHECK(r.packet.code == kProtocolVersion3);
    CHECK(r.packet.parameters == params);
    CHECK(is_startup_message(msg));
    CHECK_FALSE(is_cancel_request(msg));

    // Trailing bytes after the packet (the next message) are ignored.
    Bytes more = msg;
    more.push_back(std::byte{'X'});
    const auto r2 = parse_startup_packet(more);
    REQUIRE(r2.status == ParseStatus::Ok);
    CHECK(r2.packet.parameters == params);
}

// As Postgres's ProcessStartupPacket: the database defaults to the user's name, and a physical
// replication connection (replication as parse_bool reads true) has none.
TEST_CASE("startup: the login's database, as Postgres reads it", "[protocol][startup]") {
    const auto database_of = [](Params params) {
        StartupPacket packet;
        packet.parameters = std::move(params);
        return std::string(login_database(packet));
    };
    CHECK(database_of({{"user", "alice"}, {"database", "db1"}}) == "db1");
    CHECK(database_of({{"user", "alice"}, {"database", ""}}) == "alice");
    CHECK(database_of({{"user", "alice"}}) == "alice");
    for (const char* physical : {"true", "TRUE", "t", "tr", "yes", "Y", "on", "ON", "1"})
        CHECK(database_of({{"user", "a"}, {"database", "db1"}, {"replication", physical}}).empty());
    for (const char* other : {"database", "false", "off", "no", "0", "o", "", "truex", "2"})
        CHECK(database_of({{"user", "a"}, {"database", "db1"}, {"replication", other}}) == "db1");
}

TEST_CASE("startup: StartupMessage without parameters and with 3.x minor", "[protocol][startup]") {
    const Bytes empty = build_startup_message({});
    CHECK(empty.size() == 9);
    auto r = parse_startup_packet(empty);
    REQUIRE(r.status == ParseStatus::Ok);
    CHECK(r.packet.parameters.empty());

    Bytes minor = build_startup_message({{"user", "u"}});
    write_be32(minor.data() + 4, kProtocolVersion3 | 2);
    r = parse_startup_packet(minor);
    REQUIRE(r.status == ParseStatus::Ok);
    CHECK(r.packet.code == (kProtocolVersion3 | 2));
    CHECK(is_startup_message(minor));
}

namespace {

// The negotiation for a StartupMessage of `version` with `params`.
std::optional<ProtocolDowngrade> downgrade_of(const Params& params, uint32_t version) {
    Bytes msg = build_startup_message(params);
    write_be32(msg.data() + 4, version);
    const auto r = parse_startup_packet(msg);
    REQUIRE(r.status == ParseStatus::Ok);
    return downgrade_to_3_0(r.packet);
}

}  // namespace

TEST_CASE("startup: a newer 3.x or protocol options are negotiated down to 3.0",
          "[protocol][startup]") {
    const Params plain{{"user", "u"}, {"database", "d"}};
    const uint32_t v3_2 = kProtocolVersion3 | 2;
    SECTION("3.0 without options goes on as it is") {
        CHECK_FALSE(downgrade_of(plain, kProtocolVersion3).has_value());
    }
    SECTION("3.2 with options: 'v' names 3.0 and the options, which Postgres never sees") {
        const auto downgrade = downgrade_of(
            {{"user", "u"}, {"_pq_.one", "1"}, {"database", "d"}, {"_pq_.two", ""}}, v3_2);
        REQUIRE(downgrade.has_value());
        CHECK(downgrade->startup == build_startup_message(plain));
        const Bytes& v = downgrade->negotiate;
        REQUIRE(v.size() == 1 + 4 + 4 + 4 + sizeof "_pq_.one" + sizeof "_pq_.two");
        CHECK(v[0] == std::byte{'v'});
        CHECK(read_be32(v.data() + 1) == v.size() - 1);
        CHECK(read_be32(v.data() + 5) == kProtocolVersion3);
        CHECK(read_be32(v.data() + 9) == 2);
        CHECK(std::string(reinterpret_cast<const char*>(v.data() + 13)) == "_pq_.one");
        CHECK(std::string(reinterpret_cast<const char*>(v.data() + 13 + sizeof "_pq_.one")) ==
              "_pq_.two");
    }
    SECTION("3.0 with an option, 3.2 without: 'v' all the same") {
        for (const auto& [params, version, options] :
             {std::tuple{Params{{"user", "u"}, {"_pq_.x", "1"}, {"database", "d"}},
                         kProtocolVersion3, 1u},
              std::tuple{plain, v3_2, 0u}}) {
            const auto downgrade = downgrade_of(params, version);
            REQUIRE(downgrade.has_value());
            CHECK(downgrade->startup == build_startup_message(plain));
            CHECK(read_be32(downgrade->negotiate.data() + 5) == kProtocolVersion3);
            CHECK(read_be32(downgrade->negotiate.data() + 9) == options);
        }
    }
}

TEST_CASE("startup: SSLRequest and GSSENCRequest", "[protocol][startup]") {
    auto r = parse_startup_packet(header_only(8, kSslRequestCode));
    REQUIRE(r.status == ParseStatus::Ok);
    CHECK(r.packet.kind == StartupKind::SslRequest);
    CHECK(r.packet.length == 8);
    CHECK(r.packet.code == kSslRequestCode);

    r = parse_startup_packet(header_only(8, kGssEncRequestCode));
    REQUIRE(r.status == ParseStatus::Ok);
    CHECK(r.packet.kind == StartupKind::GssEncRequest);

    // With a body they are malformed.
    for (const uint32_t code : {kSslRequestCode, kGssEncRequestCode}) {
        r = parse_startup_packet(header_only(12, code, 12));
        CHECK(r.status == ParseStatus::Invalid);
        CHECK_FALSE(r.error.empty());
    }
    CHECK_FALSE(is_startup_message(header_only(8, kSslRequestCode)));
    CHECK_FALSE(is_cancel_request(header_only(8, kSslRequestCode)));
}

TEST_CASE("startup: CancelRequest", "[protocol][startup]") {
    const CancelKey key{0x12345678u, 0xdeadbeefu};
    const auto built = build_cancel_request(key);
    CHECK(read_be32(built.data()) == kCancelRequestLength);
    CHECK(read_be32(built.data() + 4) == kCancelRequestCode);
    CHECK(is_cancel_request(built));
    CHECK_FALSE(is_startup_message(built));

    const auto r = parse_startup_packet(built);
    REQUIRE(r.status == ParseStatus::Ok);
    CHECK(r.packet.kind == StartupKind::CancelRequest);
    CHECK(r.packet.length == kCancelRequestLength);
    CHECK(r.packet.cancel.backend_pid == key.backend_pid);
    CHECK(r.packet.cancel.secret == key.secret);

    // Hand-built with the same layout.
    Bytes manual;
    put32(manual, 16);
    put32(manual, kCancelRequestCode);
    put32(manual, 42);
    put32(manual, 4242);
    const auto m = parse_startup_packet(manual);
    REQUIRE(m.status == ParseStatus::Ok);
    CHECK(m.packet.cancel.backend_pid == 42);
    CHECK(m.packet.cancel.secret == 4242);

    // Wrong length.
    Bytes longer = manual;
    write_be32(longer.data(), 20);
    put32(longer, 0);
    CHECK(parse_startup_packet(longer).status == ParseStatus::Invalid);
    CHECK_FALSE(is_cancel_request(longer));
    const auto shorter = parse_startup_packet(header_only(12, kCancelRequestCode, 12));
    CHECK(shorter.status == ParseStatus::Invalid);
    CHECK_FALSE(shorter.error.empty());

    // is_cancel_request needs all 16 bytes.
    for (size_t n = 0; n < kCancelRequestLength; ++n)
        CHECK_FALSE(is_cancel_request(std::span(built).first(n)));
}

TEST_CASE("startup: L5 upgrade request round trip", "[protocol][startup]") {
    for (const L5Transport transport : {L5Transport::Shm, L5Transport::Rdma}) {
        L5UpgradeRequest req;
        req.transport = transport;
        req.c2s_ring_size = uint64_t{1} << 20;
        req.s2c_ring_size = (uint64_t{1} << 40) + 7;  // exercises the upper 32 bits
        const auto built = build_l5_upgrade_request(req);
        CHECK(read_be32(built.data()) == kL5UpgradeRequestLength);
        CHECK(read_be32(built.data() + 4) == kL5UpgradeRequestCode);

        const auto r = parse_startup_packet(built);
        REQUIRE(r.status == ParseStatus::Ok);
        CHECK(r.packet.kind == StartupKind::L5Upgrade);
        CHECK(r.packet.length == kL5UpgradeRequestLength);
        CHECK(r.packet.code == kL5UpgradeRequestCode);
        CHECK(r.packet.upgrade.version == kL5UpgradeVersion);
        CHECK(r.packet.upgrade.transport == transport);
        CHECK(r.packet.upgrade.c2s_ring_size == req.c2s_ring_size);
        CHECK(r.packet.upgrade.s2c_ring_size == req.s2c_ring_size);
        CHECK_FALSE(is_startup_message(built));
        CHECK_FALSE(is_cancel_request(built));
    }
}

TEST_CASE("startup: L5 upgrade request rejects bad fields", "[protocol][startup]") {
    SECTION("bad version") {
        for (const uint32_t version : {0u, 2u, 0xffffffffu}) {
            L5UpgradeRequest req;
            req.version = version;
            const auto r = parse_startup_packet(build_l5_upgrade_request(req));
            CHECK(r.status == ParseStatus::Invalid);
            CHECK_THAT(r.error, Contains("version"));
        }
    }
    SECTION("bad transport") {
        for (const uint32_t transport : {0u, 3u, 0xffffffffu}) {
            L5UpgradeRequest req;
            req.transport = static_cast<L5Transport>(transport);
            const auto r = parse_startup_packet(build_l5_upgrade_request(req));
            CHECK(r.status == ParseStatus::Invalid);
            CHECK_THAT(r.error, Contains("transport"));
        }
    }
    SECTION("wrong length") {
        const auto built = build_l5_upgrade_request({});
        // Shorter: a 24-byte packet with the upgrade code.
        Bytes shorter(built.begin(), built.begin() + 24);
        write_be32(shorter.data(), 24);
        auto r = parse_startup_packet(shorter);
        CHECK(r.status == ParseStatus::Invalid);
        CHECK_THAT(r.error, Contains("length"));
        // Longer: 40 bytes.
        Bytes longer(built.begin(), built.end());
        longer.resize(40);
        write_be32(longer.data(), 40);
        r = parse_startup_packet(longer);
        CHECK(r.status == ParseStatus::Invalid);
        CHECK_THAT(r.error, Contains("length"));
        // Just the code.
        r = parse_startup_packet(header_only(8, kL5UpgradeRequestCode));
        CHECK(r.status == ParseStatus::Invalid);
    }
}

TEST_CASE("startup: invalid packet lengths", "[protocol][startup]") {
    SECTION("too small") {
        for (uint32_t len = 0; len < kMinStartupPacketLength; ++len) {
            INFO("length " << len);
            const auto r = parse_startup_packet(header_only(len, kProtocolVersion3, 16));
            CHECK(r.status == ParseStatus::Invalid);
            CHECK_FALSE(r.error.empty());
            CHECK_FALSE(is_startup_message(header_only(len, kProtocolVersion3, 16)));
        }
        // Known invalid as soon as the 4 length bytes are there.
        Bytes four;
        put32(four, 7);
        CHECK(parse_startup_packet(four).status == ParseStatus::Invalid);
    }
    SECTION("negative") {
        for (const uint32_t len : {0xffffffffu, 0x80000000u, 0xfffffff8u}) {
            INFO("length " << len);
            const auto r = parse_startup_packet(header_only(len, kProtocolVersion3));
            CHECK(r.status == ParseStatus::Invalid);
            CHECK_FALSE(r.error.empty());
            CHECK_FALSE(is_startup_message(header_only(len, kProtocolVersion3)));
            Bytes only_length;
            put32(only_length, len);
            CHECK(parse_startup_packet(only_length).status == ParseStatus::Invalid);
        }
    }
    SECTION("too large") {
        for (const uint32_t len : {kMaxStartupPacketLength + 1, 65536u, 0x7fffffffu}) {
            INFO("length " << len);
            const auto r = parse_startup_packet(header_only(len, kProtocolVersion3));
            CHECK(r.status == ParseStatus::Invalid);
            CHECK_THAT(r.error, Contains("10004"));
            CHECK_FALSE(is_startup_message(header_only(len, kProtocolVersion3)));
        }
    }
    SECTION("exactly the maximum is fine when well formed") {
        // 8 header + "x\0" + value\0 + final \0 == 10000.
        const std::string value(kMaxStartupPacketLength - 8 - 2 - 1 - 1, 'v');
        const Params params{{"x", value}};
        const Bytes msg = build_startup_message(params);
        REQUIRE(msg.size() == kMaxStartupPacketLength);
        const auto r = parse_startup_packet(msg);
        REQUIRE(r.status == ParseStatus::Ok);
        CHECK(r.packet.parameters == params);
        CHECK(is_startup_message(msg));

        const Bytes over = build_startup_message({{"x", value + "v"}});
        REQUIRE(over.size() == kMaxStartupPacketLength + 1);
        CHECK(parse_startup_packet(over).status == ParseStatus::Invalid);
        CHECK_FALSE(is_startup_message(over));
    }
}

TEST_CASE("startup: every prefix of a packet needs more", "[protocol][startup]") {
    std::vector<Bytes> packets;
    packets.push_back(build_startup_message({{"user", "bob"}, {"database", "postgres"}}));
    const auto cancel = build_cancel_request({7, 9});
    packets.emplace_back(cancel.begin(), cancel.end());
    const auto upgrade = build_l5_upgrade_request({});
    packets.emplace_back(upgrade.begin(), upgrade.end());
    packets.push_back(header_only(8, kSslRequestCode));
    packets.push_back(build_startup_message({{"x", std::string(9980, 'y')}}));

    for (const Bytes& p : packets) {
        const size_t total = p.size();
        INFO("packet of " << total << " bytes");
        bool all_ok = true;
        for (size_t n = 0; n < total; ++n) {
            const auto r = parse_startup_packet(std::span(p).first(n));
            const size_t expected_needed = n < 4 ? 0 : total;
            if (r.status != ParseStatus::NeedMore || r.bytes_needed != expected_needed) {
                all_ok = false;
                FAIL_CHECK("prefix " << n << ": status " << static_cast<int>(r.status)
                                     << " bytes_needed " << r.bytes_needed);
            }
        }
        CHECK(all_ok);
        const auto r = parse_startup_packet(p);
        CHECK(r.status == ParseStatus::Ok);
    }
}

TEST_CASE("startup: malformed parameter lists", "[protocol][startup]") {
    SECTION("missing terminator") {
        Bytes body;
        put_str(body, "user");
        put_str(body, "alice");  // no final \0
        const auto r = parse_startup_packet(packet(kProtocolVersion3, body));
        CHECK(r.status == ParseStatus::Invalid);
        CHECK_THAT(r.error, Contains("terminator"));
    }
    SECTION("empty body") {
        const auto r = parse_startup_packet(packet(kProtocolVersion3, {}));
        CHECK(r.status == ParseStatus::Invalid);
        CHECK_FALSE(r.error.empty());
    }
    SECTION("data after terminator") {
        Bytes body;
        put_str(body, "user");
        put_str(body, "alice");
        body.push_back(std::byte{0});
        put_str(body, "junk");
        const auto r = parse_startup_packet(packet(kProtocolVersion3, body));
        CHECK(r.status == ParseStatus::Invalid);
        CHECK_THAT(r.error, Contains("after the terminator"));

        Bytes two_nuls{std::byte{0}, std::byte{0}};
        CHECK(parse_startup_packet(packet(kProtocolVersion3, two_nuls)).status ==
              ParseStatus::Invalid);
    }
    SECTION("unterminated value") {
        Bytes body;
        put_str(body, "user");
        put_str(body, "alice", false);
        const auto r = parse_startup_packet(packet(kProtocolVersion3, body));
        CHECK(r.status == ParseStatus::Invalid);
        CHECK_THAT(r.error, Contains("unterminated"));
    }
    SECTION("unterminated name") {
        Bytes body;
        put_str(body, "user", false);
        const auto r = parse_startup_packet(packet(kProtocolVersion3, body));
        CHECK(r.status == ParseStatus::Invalid);
        CHECK_FALSE(r.error.empty());
    }
    SECTION("name without value") {
        Bytes body;
        put_str(body, "user");
        body.push_back(std::byte{0});  // reads as empty value, then nothing: no terminator
        const auto r = parse_startup_packet(packet(kProtocolVersion3, body));
        CHECK(r.status == ParseStatus::Invalid);
    }
    SECTION("a repeated parameter name: Postgres would take the last, l5pgd checked one") {
        for (const char* name : {"user", "database", "options", "application_name"}) {
            Bytes body;
            put_str(body, name);
            put_str(body, "alice");
            put_str(body, "client_encoding");
            put_str(body, "UTF8");
            put_str(body, name);
            put_str(body, "postgres");
            body.push_back(std::byte{0});
            const auto r = parse_startup_packet(packet(kProtocolVersion3, body));
            CHECK(r.status == ParseStatus::Invalid);
            CHECK_THAT(r.error, Contains(std::string("\"") + name + "\" appears more than once"));
        }
    }
    SECTION("terminator only inside the length: trailing bytes are not part of the packet") {
        Bytes body;
        put_str(body, "user");
        put_str(body, "alice");
        Bytes p = packet(kProtocolVersion3, body);  // no terminator in the packet
        p.push_back(std::byte{0});                  // ...but one right after it
        const auto r = parse_startup_packet(p);
        CHECK(r.status == ParseStatus::Invalid);
    }
}

TEST_CASE("startup: unsupported protocol versions and request codes", "[protocol][startup]") {
    SECTION("protocol 2.0") {
        const auto r = parse_startup_packet(packet(2u << 16, {std::byte{0}}));
        CHECK(r.status == ParseStatus::Invalid);
        CHECK_THAT(r.error, Contains("2.0"));
        CHECK_FALSE(is_startup_message(packet(2u << 16, {std::byte{0}})));
    }
    SECTION("protocol 4.0") {
        const auto r = parse_startup_packet(packet(4u << 16, {std::byte{0}}));
        CHECK(r.status == ParseStatus::Invalid);
        CHECK_THAT(r.error, Contains("4.0"));
    }
    SECTION("unknown 1234.xxxx codes") {
        for (const uint32_t minor : {0u, 1234u, 5677u, 5681u, 5749u, 5751u, 0xffffu}) {
            INFO("minor " << minor);
            const auto r = parse_startup_packet(header_only(8, (1234u << 16) | minor, 16));
            CHECK(r.status == ParseStatus::Invalid);
            CHECK(r.error == "unsupported frontend protocol 1234." + std::to_string(minor) +
                                 ": server supports 3.0 to 3.0");
            CHECK(r.sqlstate == kSqlstateFeatureNotSupported);  // as Postgres's
        }
    }
    SECTION("a malformed packet is a protocol violation") {
        const auto r = parse_startup_packet(header_only(7, kProtocolVersion3));
        CHECK(r.sqlstate == kSqlstateProtocolViolation);
    }
}

// ---------------------------------------------------------------- ErrorResponse

TEST_CASE("ErrorResponse: build_fatal", "[protocol][error]") {
    const Bytes msg = build_fatal(kSqlstateTooManyConnections, "too many clients");
    REQUIRE(msg.size() > kMessageHeaderSize);
    CHECK(msg[0] == std::byte{'E'});
    CHECK(read_be32(msg.data() + 1) == msg.size() - 1);
    const auto h = parse_message_header(msg);
    REQUIRE(h.status == ParseStatus::Ok);
    CHECK(h.header.type == 'E');
    CHECK(h.header.total_size() == msg.size());

    const auto fields = error_fields(msg);
    const std::vector<std::pair<char, std::string>> expected{
        {'S', "FATAL"}, {'V', "FATAL"}, {'C', "53300"}, {'M', "too many clients"}};
    CHECK(fields == expected);
}

TEST_CASE("ErrorResponse: optional detail and hint", "[protocol][error]") {
    ErrorFields f;
    f.severity = "ERROR";
    f.sqlstate = kSqlstateConnectionFailure;
    f.message = "boom";
    f.detail = "some detail";
    f.hint = "try again";
    Bytes msg = build_error_response(f);
    CHECK(msg[0] == std::byte{'E'});
    CHECK(read_be32(msg.data() + 1) == msg.size() - 1);
    auto fields = error_fields(msg);
    std::vector<std::pair<char, std::string>> expected{{'S', "ERROR"},       {'V', "ERROR"},
                                                       {'C', "08006"},       {'M', "boom"},
                                                       {'D', "some detail"}, {'H', "try again"}};
    CHECK(fields == expected);

    f.detail = {};
    msg = build_error_response(f);
    fields = error_fields(msg);
    expected = {{'S', "ERROR"}, {'V', "ERROR"}, {'C', "08006"}, {'M', "boom"}, {'H', "try again"}};
    CHECK(fields == expected);

    f.hint = {};
    f.detail = "d";
    msg = build_error_response(f);
    fields = error_fields(msg);
    expected = {{'S', "ERROR"}, {'V', "ERROR"}, {'C', "08006"}, {'M', "boom"}, {'D', "d"}};
    CHECK(fields == expected);
}

TEST_CASE("ErrorResponse: defaults and empty message", "[protocol][error]") {
    const Bytes msg = build_error_response({});
    CHECK(read_be32(msg.data() + 1) == msg.size() - 1);
    const auto fields = error_fields(msg);
    const std::vector<std::pair<char, std::string>> expected{
        {'S', "FATAL"}, {'V', "FATAL"}, {'C', "08P01"}, {'M', ""}};
    CHECK(fields == expected);
}

TEST_CASE("ErrorResponse: NUL bytes are dropped", "[protocol][error]") {
    using namespace std::string_view_literals;
    ErrorFields f;
    f.message = "bad\0 user\0"sv;
    f.detail = "\0x\0y"sv;
    f.hint = "\0\0"sv;  // only NULs: the field stays, but empty
    const Bytes msg = build_error_response(f);
    CHECK(read_be32(msg.data() + 1) == msg.size() - 1);
    const auto fields = error_fields(msg);
    const std::vector<std::pair<char, std::string>> expected{
        {'S', "FATAL"}, {'V', "FATAL"}, {'C', "08P01"}, {'M', "bad user"}, {'D', "xy"}, {'H', ""}};
    CHECK(fields == expected);
    // The whole message has exactly one NUL per field plus the list terminator.
    size_t nuls = 0;
    for (size_t i = kMessageHeaderSize; i < msg.size(); ++i)
        nuls += msg[i] == std::byte{0};
    CHECK(nuls == fields.size() + 1);
    CHECK(as_string(std::span(msg).subspan(kMessageHeaderSize, 6)) == std::string("SFATAL"));
}

TEST_CASE("ErrorResponse: long message length field", "[protocol][error]") {
    const std::string big(100000, 'm');
    const Bytes msg = build_fatal(kSqlstateCannotConnectNow, big);
    CHECK(read_be32(msg.data() + 1) == msg.size() - 1);
    const auto fields = error_fields(msg);
    REQUIRE(fields.size() == 4);
    CHECK(fields[2].second == "57P03");
    CHECK(fields[3].second == big);
}

TEST_CASE("MessageBoundaryTracker: boundaries across any split of the stream") {
    // ReadyForQuery ('Z', 5, 'I') and a DataRow with a 3-byte body.
    const std::vector<std::byte> stream = {
        std::byte{'Z'}, std::byte{0},   std::byte{0}, std::byte{0}, std::byte{5},
        std::byte{'I'}, std::byte{'D'}, std::byte{0}, std::byte{0}, std::byte{0},
        std::byte{7},   std::byte{1},   std::byte{2}, std::byte{3}};
    for (size_t split = 0; split <= stream.size(); ++split) {
        l5pg::protocol::MessageBoundaryTracker tracker;
        CHECK(tracker.at_boundary());
        tracker.feed(std::span(stream).first(split));
        CHECK(tracker.at_boundary() == (split == 0 || split == 6 || split == stream.size()));
        tracker.feed(std::span(stream).subspan(split));
        CHECK(tracker.at_boundary());
    }
}

TEST_CASE("MessageBoundaryTracker: an impossible length is never a boundary again") {
    l5pg::protocol::MessageBoundaryTracker tracker;
    const std::byte bad[] = {std::byte{'E'}, std::byte{0}, std::byte{0}, std::byte{0},
                             std::byte{2}};
    tracker.feed(bad);
    CHECK_FALSE(tracker.at_boundary());
}
