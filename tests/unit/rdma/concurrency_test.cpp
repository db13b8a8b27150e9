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
