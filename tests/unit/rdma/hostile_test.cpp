// A hostile client writes whatever it likes wherever its keys let it. The server must
// never crash, must close only that client's session, and every other session must
// keep working.
#include <algorithm>
#include <cstring>

#include "test_util.hpp"

namespace l5pg::rdma {

// WRITEs `bytes` to any remote address with any rkey, bypassing the ring protocol,
// optionally followed by the client's mailbox byte; waits for the completion. False when
// the WRITE failed (the QP is then broken).
struct HostileClient {
    static bool raw_write(ClientChannel& c, uint64_t remote_addr, uint32_t rkey,
                          std::span<const std::byte> bytes, bool then_mailbox) {
        Link& link_ = c.link_;
        const Hello& server_ = c.server_;
        std::string error;
        auto buffer = Buffer::allocate(std::max<size_t>(bytes.size(), 1), error);
        if (!buffer || bytes.empty())
            return false;
        std::memcpy(buffer->data(), bytes.data(), bytes.size());
        auto mr =
            link_.pd().register_memory(buffer->data(), bytes.size(), Access::LocalWrite, error);
        if (mr == nullptr)
            return false;
        if (!link_.post_write(buffer->data(), mr->lkey(), static_cast<uint32_t>(bytes.size()),
                              remote_addr, rkey, !then_mailbox))
            return false;
        // Publish: a sleeping server gets its doorbell, as for a real record.
        if (then_mailbox &&
            !link_.post_one(WrKind::Publish, server_.mailbox_addr, server_.mailbox_rkey, true))
            return false;
        return link_.await(link_.last_signaled());
    }

    // Sets the client's mailbox byte with nothing written before it, and no doorbell.
    static bool mailbox_only(ClientChannel& c) {
        return c.link_.post_one(WrKind::Flag, c.server_.mailbox_addr, c.server_.mailbox_rkey,
                                true) &&
               c.link_.await(c.link_.last_signaled());
    }
};

}  // namespace l5pg::rdma

using namespace l5pg::rdma;
using namespace l5pg::rdma::test;

namespace {

struct Fixture {
    std::unique_ptr<Device> device = open_soft();
    EchoServer server{*device, options()};
    Client good;
    Client evil;

    static ServerOptions options() {
        ServerOptions o;
        o.max_sessions = 8;
        o.max_ring_size = 1 << 14;
        return o;
    }
    static ClientOptions client_options() {
        ClientOptions o;
        o.c2s_ring_size = 1 << 14;
        o.s2c_ring_size = 1 << 14;
        return o;
    }

    Fixture() {
        std::string error;
        good = server.connect(client_options(), error);
        evil = server.connect(client_options(), error);
        INFO(error);
        REQUIRE((good.channel && evil.channel));
        REQUIRE(eventually([&] { return server.live() == 2; }));
        check_good_client(1);
    }

    void check_good_client(uint64_t seed) {
        const auto msg = pattern(seed, 2000);
        REQUIRE(write_all(*good.channel, msg).empty());
        std::vector<std::byte> back(msg.size());
        const std::string err = read_exact(*good.channel, back);
        INFO(err);
        REQUIRE(err.empty());
        REQUIRE(back == msg);
    }

    uint64_t evil_ring() const { return evil->server_hello().area_addr + kControlSize; }
    uint32_t evil_rkey() const { return evil->server_hello().area_rkey; }

    // Repeats the hostile WRITE (plus mailbox) until the server gives up on the session.
    void keep_writing_until_closed(uint64_t addr, uint32_t rkey, std::span<const std::byte> bytes) {
        const bool closed = eventually(
            [&] {
                if (!HostileClient::raw_write(*evil.channel, addr, rkey, bytes, true))
                    return server.live() == 1;  // our QP died: the server dropped us
                std::this_thread::sleep_for(2ms);
                return server.live() == 1;
            },
            10s);
        REQUIRE(closed);
    }

    std::string server_errors() {
        std::string all;
        for (const std::string& e : server.errors())
            all += e + "\n";
        return all;
    }
};

std::vector<std::byte> header(uint32_t len, uint32_t check) {
    std::vector<std::byte> h(8);
    std::memcpy(h.data(), &len, 4);
    std::memcpy(h.data() + 4, &check, 4);
    return h;
}

}  // namespace

TEST_CASE("hostile client: garbage in its ring closes only its session", "[rdma][hostile]") {
    Fixture f;
    auto garbage = pattern(77, 600);  // header words are not complements of each other
    f.keep_writing_until_closed(f.evil_ring(), f.evil_rkey(), garbage);
    CHECK_THAT(f.server_errors(), Catch::Contains("garbage"));
    f.check_good_client(2);
}

TEST_CASE("hostile client: a complete record with an impossible length", "[rdma][hostile]") {
    Fixture f;
    f.keep_writing_until_closed(f.evil_ring(), f.evil_rkey(), header(1u << 30, ~(1u << 30)));
    CHECK_THAT(f.server_errors(), Catch::Contains("corrupt record"));
    f.check_good_client(3);
}

TEST_CASE("hostile client: an invalid OK byte", "[rdma][hostile]") {
    Fixture f;
    auto record = header(16, ~16u);
    record.resize(8 + 16 + 1, std::byte{0x41});
    record.back() = std::byte{0xfe};
    f.keep_writing_until_closed(f.evil_ring(), f.evil_rkey(), record);
    CHECK_THAT(f.server_errors(), Catch::Contains("OK byte"));
    f.check_good_client(4);
}

TEST_CASE("hostile client: WRITEs outside its own memory are refused", "[rdma][hostile]") {
    Fixture f;
    const auto bytes = pattern(5, 64);
    SECTION("past the end of its area") {
        const uint64_t end = f.evil_ring() + f.evil->server_hello().ring_size;
        CHECK_FALSE(
            HostileClient::raw_write(*f.evil.channel, end - 8, f.evil_rkey(), bytes, false));
    }
    SECTION("the good client's mailbox byte, next to its own") {
        const Hello& h = f.evil->server_hello();
        const uint64_t other = f.good->server_hello().mailbox_addr;
        CHECK_FALSE(HostileClient::raw_write(*f.evil.channel, other, h.mailbox_rkey,
                                             std::span(bytes).first(1), false));
    }
    SECTION("the good client's area with the good client's rkey") {
        const Hello& g = f.good->server_hello();
        CHECK_FALSE(HostileClient::raw_write(*f.evil.channel, g.area_addr + kControlSize,
                                             g.area_rkey, bytes, false));
    }
    CHECK(f.evil->broken());
    REQUIRE(eventually([&] { return f.server.live() == 1; }));
    CHECK_THAT(f.server_errors(), Catch::Contains("remote access error"));
    f.check_good_client(6);
}

TEST_CASE("hostile client: garbage in its control block harms nobody else", "[rdma][hostile]") {
    Fixture f;
    const auto garbage = pattern(8, kControlSize);
    REQUIRE(HostileClient::raw_write(*f.evil.channel, f.evil->server_hello().area_addr,
                                     f.evil_rkey(), garbage, true));
    f.check_good_client(7);
    f.check_good_client(8);
    CHECK(f.server.errors().empty());
    CHECK(f.server.live() == 2);
}

TEST_CASE("hostile client: a mailbox byte with nothing behind it keeps no server awake",
          "[rdma][hostile]") {
    auto device = open_soft();
    std::string error;
    auto endpoint = ServerEndpoint::create(*device, Fixture::options(), error);
    REQUIRE(endpoint != nullptr);
    SessionPair p = connect_pair(*device, *endpoint, Fixture::client_options());
    std::array<ServerSession*, 4> ready{};
    bool settled = false;
    REQUIRE(eventually([&] { return endpoint->prepare_to_block(ready, settled) == 0 && settled; }));
    // A client that sets its byte over and over kept the worker from ever blocking.
    for (int i = 0; i < 3; ++i) {
        REQUIRE(HostileClient::mailbox_only(*p.client.channel));
        CHECK(endpoint->prepare_to_block(ready, settled) == 0);
    }
    // What a client publishes still wakes the server, through its doorbell.
    REQUIRE(p.client.channel->write(pattern(1, 10)).bytes == 10);
    REQUIRE(socket_readable(p.server_fd.get(), 5000));
    p.session->on_socket_readable();
    CHECK(endpoint->prepare_to_block(ready, settled) == 1);
    std::vector<std::byte> got(10);
    CHECK(p.session->read(got).bytes == 10);
}
