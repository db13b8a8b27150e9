// The admin console's commands, fed directly (the console's I/O is tested end to end in
// tests/integration/test_admin_console.py).
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/reload_keys.hpp"
#include "daemon/admin_query.hpp"
#include "protocol/wire.hpp"

using namespace l5pg;
using namespace l5pg::daemon;

namespace {

struct Message {
    char type;
    std::string body;
};

std::vector<Message> split(const std::vector<std::byte>& bytes) {
    std::vector<Message> out;
    size_t at = 0;
    while (at + 5 <= bytes.size()) {
        const uint32_t len = protocol::read_be32(bytes.data() + at + 1);
        REQUIRE(at + 1 + len <= bytes.size());
        out.push_back({static_cast<char>(bytes[at]),
                       std::string(reinterpret_cast<const char*>(bytes.data()) + at + 5, len - 4)});
        at += 1 + len;
    }
    REQUIRE(at == bytes.size());
    return out;
}

std::vector<Message> ask(std::string_view sql, const SessionDirectory& sessions,
                         const PoolDirectory& pools = PoolDirectory(),
                         const config::Config& config = config::Config(),
                         const Metrics& metrics = Metrics()) {
    protocol::BackendWriter out;
    CHECK_FALSE(answer_admin_query(sql, AdminView{sessions, pools, config, metrics}, out));
    return split(out.bytes());
}

// A DataRow's columns; a NULL one as "NULL".
std::vector<std::string> columns(const Message& row) {
    REQUIRE(row.type == 'D');
    const auto* p = reinterpret_cast<const std::byte*>(row.body.data());
    const size_t n = (static_cast<size_t>(p[0]) << 8) | static_cast<size_t>(p[1]);
    std::vector<std::string> out;
    size_t at = 2;
    for (size_t i = 0; i < n; ++i) {
        const uint32_t len = protocol::read_be32(p + at);
        if (len == 0xffffffffu) {
            out.emplace_back("NULL");
            at += 4;
            continue;
        }
        REQUIRE(at + 4 + len <= row.body.size());
        out.push_back(row.body.substr(at + 4, len));
        at += 4 + len;
    }
    return out;
}

std::string types(const std::vector<Message>& messages) {
    std::string t;
    for (const auto& m : messages)
        t += m.type;
    return t;
}

}  // namespace

TEST_CASE("admin console: SHOW SESSIONS lists the directory's records in id order") {
    SessionDirectory sessions;
    for (uint64_t id : {7, 3}) {
        auto r = std::make_shared<SessionRecord>();
        r->id = id;
        r->transport = id == 3 ? Transport::Shm : Transport::Tcp;
        r->client = id == 3 ? "uid 1000 pid 42" : "10.0.0.1:5555";
        r->database = "app";
        r->role = "alice";
        r->bytes_from_client = 10 * id;
        if (id == 3)
            r->backend_pid = 424242;
        sessions.add(std::move(r));
    }
    const auto m = ask("  show   Sessions ; ", sessions);
    REQUIRE(types(m) == "TDDCZ");
    CHECK(m[0].body.find(std::string("backend_pid") + '\0') != std::string::npos);
    CHECK(columns(m[1]).back() == "424242");
    CHECK(columns(m[2]).back() == "NULL");  // not known yet
    CHECK(m[1].body.find("shm") != std::string::npos);
    CHECK(m[1].body.find("uid 1000 pid 42") != std::string::npos);
    CHECK(m[1].body.find("30") != std::string::npos);
    CHECK(m[2].body.find("10.0.0.1:5555") != std::string::npos);
    CHECK(m[3].body == std::string("SHOW 2") + '\0');
    sessions.remove(3);
    CHECK(types(ask("SHOW CLIENTS", sessions)) == "TDCZ");
}

TEST_CASE("admin console: unknown commands are errors, empty queries are empty") {
    const SessionDirectory sessions;
    const auto unknown = ask("select * from pg_shadow", sessions);
    REQUIRE(types(unknown) == "EZ");
    CHECK(unknown[0].body.find("0A000") != std::string::npos);
    CHECK(unknown[0].body.find("SHOW HELP") != std::string::npos);
    CHECK(types(ask(" ; ", sessions)) == "IZ");
    CHECK(types(ask("show version", sessions)) == "TDCZ");
    CHECK(types(ask("SHOW HELP", sessions)) == "TDDDDDDDDCZ");
}

// The console announces client_encoding UTF8; names are the client's bytes, which may be
// anything (listed before Postgres saw them): shown with U+FFFD for what is not UTF-8, and
// an unknown command echoed cut at a character boundary.
TEST_CASE("admin console: names and echoed commands are valid UTF-8") {
    SessionDirectory sessions;
    auto r = std::make_shared<SessionRecord>();
    r->id = 1;
    r->database = "caf\xc3\xa9\xff";
    r->role = "\xe2\x82";  // a sequence cut short
    sessions.add(std::move(r));
    const auto listed = ask("show sessions", sessions);
    REQUIRE(types(listed) == "TDCZ");
    CHECK(columns(listed[1])[3] == "caf\xc3\xa9\xef\xbf\xbd");
    CHECK(columns(listed[1])[4] == "\xef\xbf\xbd\xef\xbf\xbd");
    const auto pools = ask("show pools", sessions);
    REQUIRE(types(pools) == "TDCZ");
    CHECK(columns(pools[1])[0] == "caf\xc3\xa9\xef\xbf\xbd");
    // 199 ASCII bytes, then a two-byte character across the 200-byte cut.
    const auto unknown = ask(std::string(199, 'x') + "\xc3\xa9", sessions);
    REQUIRE(types(unknown) == "EZ");
    CHECK(unknown[0].body.find(std::string(199, 'x') + "\"") != std::string::npos);
}

TEST_CASE("admin console: RELOAD asks for a reload once and answers with its outcome") {
    const SessionDirectory sessions;
    const PoolDirectory pools;
    const config::Config config;
    const Metrics metrics;
    ReloadLedger ledger;
    int asked = 0;
    protocol::BackendWriter out;
    const std::optional<uint64_t> ticket =
        answer_admin_query(" reload; ",
                           AdminView{sessions, pools, config, metrics,
                                     [&] {
                                         ++asked;
                                         return ledger.ask();
                                     }},
                           out);
    REQUIRE(ticket.has_value());
    CHECK(out.bytes().empty());  // nothing until the reload ran
    CHECK(asked == 1);
    CHECK_FALSE(ledger.outcome(*ticket).has_value());
    // A reload that began before the RELOAD was asked does not answer it.
    const uint64_t earlier = ledger.begin() - 1;
    ledger.finish(earlier, {true, {}, {}});
    CHECK_FALSE(ledger.outcome(*ticket).has_value());
    ledger.finish(ledger.begin(),
                  {true, {}, {"listen.port changed (6432 -> 7) but needs a restart"}});
    REQUIRE(ledger.outcome(*ticket).has_value());
    answer_reload(*ledger.outcome(*ticket), out);
    const auto m = split(out.bytes());
    REQUIRE(types(m) == "NCZ");  // the key that needs a restart as a WARNING first
    CHECK(m[0].body.find("SWARNING") != std::string::npos);
    CHECK(m[0].body.find("C01000") != std::string::npos);
    CHECK(m[0].body.find("Ml5pgd: reload: listen.port changed (6432 -> 7) but needs a restart") !=
          std::string::npos);
    CHECK(m[1].body == std::string("RELOAD") + '\0');
    // A reload that found the configuration invalid: an ERROR saying why.
    protocol::BackendWriter failed;
    answer_reload({false, "unknown key \"nosuch\"", {}}, failed);
    const auto f = split(failed.bytes());
    REQUIRE(types(f) == "EZ");
    CHECK(f[0].body.find("CF0000") != std::string::npos);
    CHECK(f[0].body.find("RELOAD failed, the running configuration stays: unknown key") !=
          std::string::npos);
    // Where the role may not reload (no request_reload: admin.stats_users), permission denied.
    const auto refused = ask("RELOAD", sessions);
    REQUIRE(types(refused) == "EZ");
    CHECK(refused[0].body.find("C42501") != std::string::npos);
    CHECK(refused[0].body.find("admin.users") != std::string::npos);
}

TEST_CASE(
    "admin console: SHOW POOLS counts sessions and idle server connections per "
    "database and role") {
    SessionDirectory sessions;
    for (uint64_t id : {1, 2}) {
        auto r = std::make_shared<SessionRecord>();
        r->id = id;
        r->database = "app";
        r->role = "alice";
        sessions.add(std::move(r));
    }
    PoolDirectory pools;
    pools.change({"app", "alice"}, 3);
    pools.change({"app", "alice"}, -1);
    pools.change({"crm", "bob"}, 1);
    pools.change({"old", "carol"}, 1);
    pools.change({"old", "carol"}, -1);  // gone again: not listed
    const auto m = ask("show pools", sessions, pools);
    REQUIRE(types(m) == "TDDCZ");
    CHECK(m[1].body.find("app") != std::string::npos);
    CHECK(m[1].body.find("alice") != std::string::npos);
    // DataRow: 4 columns, each a 4-byte length and the text: "2" sessions, "2" idle.
    CHECK(m[1].body.substr(m[1].body.size() - 10) == std::string("\0\0\0\x01"
                                                                 "2"
                                                                 "\0\0\0\x01"
                                                                 "2",
                                                                 10));
    CHECK(m[2].body.find("crm") != std::string::npos);
    CHECK(m[3].body == std::string("SHOW 2") + '\0');
}

TEST_CASE("admin console: SHOW CONFIG lists every key with its value, default and reloadability") {
    const SessionDirectory sessions;
    const config::Config running =
        config::load_from_string("shm:\n  spin_us: 7\n", {"listen.port=7000"});
    const auto m = ask("Show Config;", sessions, PoolDirectory(), running);
    const size_t keys = config::reload_keys().size();
    REQUIRE(types(m) == "T" + std::string(keys, 'D') + "CZ");
    std::vector<std::vector<std::string>> rows;
    for (size_t i = 1; i <= keys; ++i)
        rows.push_back(columns(m[i]));
    const auto row = [&](std::string_view key) {
        const auto it =
            std::find_if(rows.begin(), rows.end(), [&](const auto& r) { return r.at(0) == key; });
        REQUIRE(it != rows.end());
        return *it;
    };
    CHECK(row("shm.spin_us") ==
          std::vector<std::string>{"shm.spin_us", "7", std::to_string(config::Config().shm.spin_us),
                                   "yes"});
    CHECK(row("listen.port") == std::vector<std::string>{"listen.port", "7000", "6432", "no"});
    CHECK(row("listen.tcp_address")[1] == "\"127.0.0.1\"");
    CHECK(row("pool.mode") == std::vector<std::string>{"pool.mode", "none", "none", "yes"});
    CHECK(m[keys + 1].body == fmt::format("SHOW {}", keys) + '\0');
}

TEST_CASE("admin console: SHOW STATS lists each transport's totals") {
    const SessionDirectory sessions;
    Metrics metrics;
    metrics.session_opened(Transport::Shm);
    metrics.session_opened(Transport::Shm);
    metrics.session_closed(Transport::Shm);
    metrics.session_error(Transport::Shm);
    metrics.add_bytes(Transport::Shm, Direction::ClientToServer, 120);
    metrics.add_bytes(Transport::Shm, Direction::ServerToClient, 4000);
    metrics.observe_round_trip(Transport::Shm, std::chrono::microseconds(30));
    metrics.observe_round_trip(Transport::Shm, std::chrono::microseconds(50));
    const auto m = ask("show stats;", sessions, PoolDirectory(), config::Config(), metrics);
    REQUIRE(types(m) == "TDDDDCZ");
    CHECK(columns(m[1]) == std::vector<std::string>{"unix", "0", "0", "0", "0", "0", "0", "0.0"});
    CHECK(columns(m[2]) ==
          std::vector<std::string>{"shm", "2", "1", "1", "120", "4000", "2", "40.0"});
    CHECK(m[5].body == std::string("SHOW 4") + '\0');
}
