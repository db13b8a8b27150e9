// Many clients on one server's mailbox array, talking at the same time from several
// threads, each with its own content; plus the limit on the number of sessions.
#include <random>
#include <thread>

#include "test_util.hpp"
#include "transport/rdma/channel/mailbox.hpp"

using namespace l5pg::rdma;
using namespace l5pg::rdma::test;

TEST_CASE("concurrency: 64 clients share one mailbox array", "[rdma][concurrency]") {
    constexpr int kClients = 64;
    constexpr int kThreads = 8;
    constexpr int kRounds = 12;
    auto device = open_soft();
    ServerOptions options;
    options.max_sessions = kClients;
    options.max_ring_size = 1 << 14;
    EchoServer server(*device, options);
    ClientOptions copts;
    copts.c2s_ring_size = 1 << 14;
    copts.s2c_ring_size = 1 << 14;
    copts.budget = {std::chrono::microseconds(1), std::chrono::microseconds(20)};

    std::vector<Client> clients;
    std::string error;
    for (int i = 0; i < kClients; ++i) {
        clients.push_back(server.connect(copts, error));
        INFO(i << ": " << error);
        REQUIRE(clients.back().channel != nullptr);
    }
    REQUIRE(eventually([&] { return server.live() == kClients; }));

    // Every slot is taken: one more client is refused, nobody else notices.
    Client extra = server.connect(copts, error);
    CHECK(extra.channel == nullptr);
    REQUIRE(eventually([&] { return !server.errors().empty(); }));
    CHECK_THAT(server.errors().front(), Catch::Contains("mailbox slots are in use"));

    std::vector<std::string> failures(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            std::mt19937 rng(static_cast<unsigned>(t));
            for (int round = 0; round < kRounds && failures[t].empty(); ++round) {
                // Every client of this thread sends, then every one reads its echo: all 64
                // sessions have requests in flight at the same time.
                std::vector<std::vector<std::byte>> sent;
                for (int k = 0; k < kClients / kThreads; ++k) {
                    const int id = t * (kClients / kThreads) + k;
                    sent.push_back(
                        pattern(static_cast<uint64_t>(id) * 1000 + round, 1 + rng() % 3000));
                    if (std::string e = write_all(*clients[id].channel, sent.back()); !e.empty()) {
                        failures[t] = "client " + std::to_string(id) + ": " + e;
                        return;
                    }
                }
                for (int k = 0; k < kClients / kThreads; ++k) {
                    const int id = t * (kClients / kThreads) + k;
                    std::vector<std::byte> back(sent[k].size());
                    if (std::string e = read_exact(*clients[id].channel, back); !e.empty()) {
                        failures[t] = "client " + std::to_string(id) + ": " + e;
                        return;
                    }
                    if (back != sent[k]) {
                        failures[t] = "client " + std::to_string(id) + ": echo differs";
                        return;
                    }
                }
            }
        });
    }
    for (std::thread& t : threads)
        t.join();
    for (const std::string& f : failures)
        CHECK(f == "");
    CHECK(server.errors().size() == 1);  // only the refused 65th client

    // Clients leaving free their slots for new ones.
    clients.resize(kClients - 1);
    REQUIRE(eventually([&] { return server.live() == kClients - 1; }));
    Client again = server.connect(copts, error);
    INFO(error);
    REQUIRE(again.channel != nullptr);
    const auto msg = pattern(4242, 100);
    REQUIRE(write_all(*again.channel, msg).empty());
    std::vector<std::byte> back(msg.size());
    REQUIRE(read_exact(*again.channel, back).empty());
    CHECK(back == msg);
}

TEST_CASE("mailbox array: slots, scanning, limits", "[rdma][concurrency]") {
    std::string error;
    CHECK_FALSE(MailboxArray::create(0, error).has_value());
    auto mb = MailboxArray::create(70, error);
    REQUIRE(mb.has_value());
    std::vector<uint32_t> slots;
    for (int i = 0; i < 70; ++i) {
        auto s = mb->acquire();
        REQUIRE(s.has_value());
        slots.push_back(*s);
    }
    CHECK_FALSE(mb->acquire().has_value());
    for (uint32_t s : {3u, 9u, 64u, 69u})
        store_u8(mb->slot_addr(s), 1, std::memory_order_release);
    std::array<uint32_t, 3> out{};
    REQUIRE(mb->scan(out) == 3);  // only as many as fit; the rest stay set
    CHECK(out == std::array<uint32_t, 3>{3, 9, 64});
    REQUIRE(mb->scan(out) == 1);
    CHECK(out[0] == 69);
    CHECK(mb->scan(out) == 0);
    // A released slot is cleared and handed out again.
    store_u8(mb->slot_addr(9), 1, std::memory_order_release);
    mb->release(9);
    CHECK(mb->scan(out) == 0);
    CHECK(mb->acquire() == std::optional<uint32_t>(9));
}

TEST_CASE("mailbox array: a scan goes on where the last one stopped", "[rdma][concurrency]") {
    // 64 clients that set their bytes again as soon as they are cleared must not hide the
    // ones above them, nor keep a caller that scans until a scan comes back short busy.
    std::string error;
    auto mb = MailboxArray::create(200, error);
    REQUIRE(mb.has_value());
    for (int i = 0; i < 200; ++i)
        REQUIRE(mb->acquire().has_value());
    std::array<uint32_t, 64> out{};
    const auto set = [&](uint32_t from, uint32_t to) {
        for (uint32_t s = from; s < to; ++s)
            store_u8(mb->slot_addr(s), 1, std::memory_order_release);
    };
    set(0, 64);
    set(150, 151);
    set(199, 200);
    REQUIRE(mb->scan(out) == 64);
    CHECK(out.front() == 0);
    CHECK(out.back() == 63);
    set(0, 64);  // again at once
    REQUIRE(mb->scan(out) == 2);
    CHECK(out[0] == 150);
    CHECK(out[1] == 199);
    // The end was reached: the next scan starts over.
    REQUIRE(mb->scan(out) == 64);
    CHECK(out.front() == 0);
    CHECK(mb->scan(out) == 0);
    // Mid-word resumption: 3 fit, so the scan stops after slot 7; set again, 5–7 wait
    // for the scan after the next, which begins at slot 8.
    set(5, 8);
    set(10, 12);
    std::array<uint32_t, 3> few{};
    REQUIRE(mb->scan(few) == 3);
    CHECK(few == std::array<uint32_t, 3>{5, 6, 7});
    set(5, 8);
    REQUIRE(mb->scan(few) == 2);
    CHECK(few[0] == 10);
    CHECK(few[1] == 11);
    REQUIRE(mb->scan(few) == 3);
    CHECK(few == std::array<uint32_t, 3>{5, 6, 7});
}
