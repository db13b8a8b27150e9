// The protocol pieces of session pooling: the tracker's walk (where a Terminate begins, the
// ReadyForQuery status), the server greeting l5pgd keeps and the ParameterStatus reports
// that update it, and the reset's strict answer; and the watcher that picks a plain session's
// cancel key out of Postgres's first bytes; the login check a kept backend passes before reuse.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "protocol/backend_key_watcher.hpp"
#include "protocol/backend_messages.hpp"
#include "protocol/framing.hpp"
#include "protocol/parameter_status_follower.hpp"
#include "protocol/pool_login_check.hpp"
#include "protocol/pool_reset.hpp"
#include "protocol/server_greeting.hpp"
#include "protocol/wire.hpp"

using namespace l5pg::protocol;

namespace {

using Bytes = std::vector<std::byte>;

Bytes message(char type, std::string_view body) {
    Bytes out(kMessageHeaderSize + body.size());
    out[0] = std::byte{static_cast<unsigned char>(type)};
    write_be32(out.data() + 1, static_cast<uint32_t>(4 + body.size()));
    std::memcpy(out.data() + kMessageHeaderSize, body.data(), body.size());
    return out;
}

Bytes concat(std::initializer_list<Bytes> parts) {
    Bytes out;
    for (const Bytes& p : parts)
        out.insert(out.end(), p.begin(), p.end());
    return out;
}

Bytes cstrings(std::initializer_list<std::string_view> parts) {
    Bytes out;
    for (std::string_view p : parts) {
        for (char c : p)
            out.push_back(std::byte{static_cast<unsigned char>(c)});
        out.push_back(std::byte{0});
    }
    return out;
}

std::string text(const Bytes& b) {
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// What Postgres 15 answers a trusted StartupMessage with.
Bytes plain_greeting() {
    BackendWriter w;
    w.authentication_ok();
    w.parameter_status("server_version", "15.8");
    w.parameter_status("application_name", "psql");
    w.backend_key_data(4242, 0xdeadbeef);
    w.ready_for_query('I');
    return w.take();
}

// The exact answer to PoolReset(nonce).request(), optionally with `extra` in front.
Bytes reset_answer(uint64_t nonce, const Bytes& before = {}) {
    const std::string value = fmt::format("l5pgd-reset-{:016x}", nonce);
    BackendWriter w;
    w.command_complete("DISCARD ALL");
    w.parameter_status("application_name", "psql");
    w.ready_for_query('I');
    w.command_complete("RESET");
    w.row_description({"?column?"});
    w.data_row({value});
    w.command_complete("SELECT 1");
    w.ready_for_query('I');
    return concat({before, w.take()});
}

// The answer to PoolLoginCheck::request(): the row, if any, with its eight values.
Bytes login_check_answer(const std::vector<std::optional<std::string>>& row,
                         std::string_view tag = "SELECT 1") {
    BackendWriter w;
    w.row_description({"rolname", "datname", "?column?", "?column?", "concat", "?column?",
                       "?column?", "?column?"});
    if (!row.empty())
        w.data_row(row);
    w.command_complete(tag);
    w.ready_for_query('I');
    return w.take();
}

PoolLoginCheck::Status check(PoolLoginCheck& login_check, const Bytes& answer,
                             ServerGreeting& greeting) {
    return login_check.feed(answer, greeting);
}

// What pg_db_role_setting gave the backend when it started.
constexpr std::string_view kSettings = "0 16384 {statement_timeout=5s};5 0 {work_mem=8MB}";

PoolLoginCheck reuse_check(std::string_view role = "alice") {
    return PoolLoginCheck(role, "app", PoolLoginCheck::Purpose::BeforeReuse,
                          std::string(kSettings));
}

Bytes error_response(std::string_view severity, std::string_view message) {
    BackendWriter w;
    w.error(severity, "57P01", message);
    return w.take();
}

}  // namespace

TEST_CASE("walk: stops in front of a Terminate at any split, and counts what went before") {
    const Bytes stream =
        concat({message('Q', text(cstrings({"select 1"}))), message('S', ""), message('X', "")});
    const size_t terminate_at = stream.size() - kMessageHeaderSize;
    for (size_t split = 0; split <= stream.size(); ++split) {
        MessageBoundaryTracker tracker;
        std::string types;
        auto on_message = [&](char type, size_t) {
            if (type == 'X')
                return false;
            types += type;
            return true;
        };
        const size_t first = tracker.walk(std::span(stream).first(split), on_message);
        if (split <= terminate_at) {
            CHECK(first == split);
            const size_t second = tracker.walk(std::span(stream).subspan(split), on_message);
            CHECK(split + second == terminate_at);
        } else {
            CHECK(first == terminate_at);
        }
        CHECK(types == "QS");
        CHECK(tracker.at_boundary());
    }
}

TEST_CASE("walk: the ReadyForQuery status, also when the status byte comes alone") {
    const Bytes stream =
        concat({message('Z', "T"), message('C', text(cstrings({"COMMIT"}))), message('Z', "I")});
    for (size_t split = 0; split <= stream.size(); ++split) {
        MessageBoundaryTracker tracker;
        tracker.feed(std::span(stream).first(split));
        tracker.feed(std::span(stream).subspan(split));
        CHECK(tracker.ready_status() == 'I');
    }
    MessageBoundaryTracker tracker;
    tracker.feed(message('Z', "E"));
    CHECK(tracker.ready_status() == 'E');
}

TEST_CASE("next_message: whole messages only, bounds checked") {
    const Bytes m = message('S', text(cstrings({"a", "b"})));
    CHECK(next_message(std::span(m).first(4)).status == ParseStatus::NeedMore);
    CHECK(next_message(std::span(m).first(m.size() - 1)).status == ParseStatus::NeedMore);
    const MessageView whole = next_message(m);
    REQUIRE(whole.status == ParseStatus::Ok);
    CHECK(whole.type == 'S');
    CHECK(whole.total_size() == m.size());
    Bytes bad = m;
    write_be32(bad.data() + 1, 3);
    CHECK(next_message(bad).status == ParseStatus::Invalid);
}

TEST_CASE("GreetingReader: a plain greeting, byte by byte, and the client's own key") {
    const Bytes greeting = plain_greeting();
    GreetingReader reader;
    GreetingReader::Status status = GreetingReader::Status::NeedMore;
    for (size_t i = 0; i < greeting.size(); ++i) {
        status = reader.feed(std::span(greeting).subspan(i, 1));
        if (i + 1 < greeting.size())
            REQUIRE(status == GreetingReader::Status::NeedMore);
    }
    REQUIRE(status == GreetingReader::Status::Complete);
    CHECK(reader.greeting().key == CancelKey{4242, 0xdeadbeef});
    CHECK(reader.rest().empty());
    // Rebuilt with another key, the greeting is the same but for the key.
    const Bytes rebuilt = reader.greeting().build({7, 9});
    CHECK(rebuilt.size() == greeting.size());
    CHECK(text(rebuilt).find("server_version") != std::string::npos);
    CHECK(rebuilt != greeting);
    CHECK(reader.greeting().build({4242, 0xdeadbeef}) == greeting);
}

TEST_CASE("GreetingReader: bytes after the ReadyForQuery are the client's") {
    const Bytes after = message('C', text(cstrings({"SELECT 1"})));
    GreetingReader reader;
    CHECK(reader.feed(concat({plain_greeting(), after})) == GreetingReader::Status::Complete);
    CHECK(Bytes(reader.rest().begin(), reader.rest().end()) == after);
}

TEST_CASE("GreetingReader: anything but the plain greeting is not pooled, and kept whole") {
    Bytes password_request = message('R', "");
    password_request.resize(kMessageHeaderSize + 4);
    write_be32(password_request.data() + 1, 8);
    write_be32(password_request.data() + kMessageHeaderSize, 10);  // SASL
    BackendWriter fatal;
    fatal.error("FATAL", "3D000", "database \"nope\" does not exist");
    Bytes long_key = message('K', std::string(12, 'k'));  // protocol 3.2's longer secret
    BackendWriter ok;
    ok.authentication_ok();
    for (const Bytes& answer : {password_request, fatal.take(), concat({ok.bytes(), long_key}),
                                concat({ok.bytes(), message('Z', "I")}) /* no key */}) {
        GreetingReader reader;
        CHECK(reader.feed(answer) == GreetingReader::Status::NotPoolable);
        CHECK_FALSE(reader.too_many_connections());
        CHECK(reader.take_bytes() == answer);
    }
    GreetingReader huge;
    const Bytes big = message('S', std::string(GreetingReader::kMaxSize, 'x'));
    CHECK(huge.feed(concat({ok.bytes(), big})) == GreetingReader::Status::NotPoolable);
}

TEST_CASE("GreetingReader: a refusal for too many connections is told apart") {
    BackendWriter max_connections;  // InitProcess(), before any authentication
    max_connections.error("FATAL", "53300", "sorry, too many clients already");
    BackendWriter role_limit;  // after AuthenticationOk
    role_limit.authentication_ok();
    role_limit.error("FATAL", "53300", "too many connections for role \"app\"");
    for (BackendWriter* answer : {&max_connections, &role_limit}) {
        GreetingReader reader;
        CHECK(reader.feed(answer->take()) == GreetingReader::Status::NotPoolable);
        CHECK(reader.too_many_connections());
    }
}

TEST_CASE("PoolReset: the exact answer, in any pieces, updates the parameters") {
    const uint64_t nonce = 0x0123456789abcdefULL;
    PoolReset reset(nonce);
    const Bytes request = reset.request();
    CHECK(text(request).find("DISCARD ALL") != std::string::npos);
    CHECK(text(request).find("RESET ROLE; SELECT") != std::string::npos);
    CHECK(text(request).find("l5pgd-reset-0123456789abcdef") != std::string::npos);
    ServerGreeting greeting;
    greeting.set_parameter("application_name", "evil");
    const Bytes answer = reset_answer(nonce);
    PoolReset::Status status = PoolReset::Status::NeedMore;
    for (size_t i = 0; i < answer.size(); i += 7)
        status = reset.feed(std::span(answer).subspan(i, std::min<size_t>(7, answer.size() - i)),
                            greeting);
    CHECK(status == PoolReset::Status::Done);
    REQUIRE(greeting.parameters.size() == 1);
    CHECK(greeting.parameters[0].second == "psql");
}

TEST_CASE("PoolReset: output still due to the previous client fails the reset") {
    const uint64_t nonce = 42;
    ServerGreeting greeting;
    BackendWriter smuggled;  // the answer to a DISCARD ALL the client slipped past the count
    smuggled.command_complete("DISCARD ALL");
    smuggled.ready_for_query('I');
    CHECK(PoolReset(nonce).feed(reset_answer(nonce, smuggled.take()), greeting) ==
          PoolReset::Status::Failed);
    // Another nonce's answer: a replay of an earlier reset.
    CHECK(PoolReset(nonce).feed(reset_answer(43), greeting) == PoolReset::Status::Failed);
    // Anything after the answer.
    PoolReset trailing(nonce);
    CHECK(trailing.feed(concat({reset_answer(nonce), message('N', "")}), greeting) ==
          PoolReset::Status::Failed);
    // Inside a transaction the reset errors out.
    BackendWriter error;
    error.error("ERROR", "25001", "DISCARD ALL cannot run inside a transaction block");
    error.ready_for_query('T');
    CHECK(PoolReset(nonce).feed(error.take(), greeting) == PoolReset::Status::Failed);
}

TEST_CASE("BackendKeyWatcher: the key of a trusted or a password login, in any pieces") {
    // SCRAM: AuthenticationSASL, SASLContinue, SASLFinal before AuthenticationOk.
    const auto auth = [](uint32_t code, std::string_view data) {
        Bytes body(4);
        write_be32(body.data(), code);
        body.insert(body.end(), reinterpret_cast<const std::byte*>(data.data()),
                    reinterpret_cast<const std::byte*>(data.data()) + data.size());
        return message('R', text(body));
    };
    const Bytes scram = concat({auth(10, text(cstrings({"SCRAM-SHA-256", ""}))),
                                auth(11, "r=abc,s=def,i=4096"), auth(12, "v=xyz")});
    for (const Bytes& start : {plain_greeting(), concat({scram, plain_greeting()})}) {
        for (size_t piece = 1; piece <= start.size(); ++piece) {
            BackendKeyWatcher watcher;
            BackendKeyWatcher::Status status = BackendKeyWatcher::Status::Watching;
            for (size_t i = 0; i < start.size(); i += piece)
                status =
                    watcher.feed(std::span(start).subspan(i, std::min(piece, start.size() - i)));
            CHECK(status == BackendKeyWatcher::Status::Done);
            CHECK(watcher.logged_in());
            REQUIRE(watcher.key().has_value());
            CHECK(*watcher.key() == CancelKey{4242, 0xdeadbeef});
            // Trusted (plain greeting) or asked for a password (SCRAM first).
            CHECK(watcher.accepted_without_asking() == (start.size() == plain_greeting().size()));
        }
    }
}

TEST_CASE("BackendKeyWatcher: an unasked AuthenticationOk is known once whole, not before") {
    const Bytes greeting = plain_greeting();
    BackendKeyWatcher watcher;
    (void)watcher.feed(std::span(greeting).first(8));  // AuthenticationOk is 9 bytes
    CHECK_FALSE(watcher.accepted_without_asking());
    (void)watcher.feed(std::span(greeting).subspan(8, 1));
    CHECK(watcher.accepted_without_asking());

    BackendKeyWatcher cleartext;  // AuthenticationCleartextPassword (3), then Ok
    Bytes asked(4);
    write_be32(asked.data(), 3);
    (void)cleartext.feed(concat({message('R', text(asked)), greeting}));
    CHECK_FALSE(cleartext.accepted_without_asking());
}

TEST_CASE("BackendKeyWatcher: no usable key, and nothing after the first ReadyForQuery") {
    const Bytes ok = message('R', std::string(4, '\0'));
    const Bytes ready = message('Z', "I");
    BackendKeyWatcher without_key;
    CHECK(without_key.feed(concat({ok, ready})) == BackendKeyWatcher::Status::Done);
    CHECK_FALSE(without_key.key().has_value());
    CHECK(without_key.logged_in());  // logged in all the same
    // Too late: the key must come before the first ReadyForQuery.
    CHECK(without_key.feed(message('K', std::string(8, '\x01'))) ==
          BackendKeyWatcher::Status::Done);
    CHECK_FALSE(without_key.key().has_value());

    BackendKeyWatcher long_secret;  // protocol 3.2: a secret of up to 256 bytes
    CHECK(long_secret.feed(concat({ok, message('K', std::string(36, '\x01')), ready})) ==
          BackendKeyWatcher::Status::Done);
    CHECK_FALSE(long_secret.key().has_value());

    BackendKeyWatcher bad_length;
    Bytes bad = message('K', std::string(8, '\x01'));
    write_be32(bad.data() + 1, 2);  // a length below the header's own 4 bytes
    CHECK(bad_length.feed(bad) == BackendKeyWatcher::Status::Done);
    CHECK_FALSE(bad_length.key().has_value());
    CHECK_FALSE(bad_length.logged_in());

    BackendKeyWatcher oversized;  // gives up, keeping no more than its limit and a piece
    const Bytes huge = message('N', std::string(BackendKeyWatcher::kMaxSize, 'x'));
    BackendKeyWatcher::Status status = BackendKeyWatcher::Status::Watching;
    for (size_t i = 0; i < huge.size() && status == BackendKeyWatcher::Status::Watching; i += 8192)
        status =
            oversized.feed(std::span(huge).subspan(i, std::min<size_t>(8192, huge.size() - i)));
    CHECK(status == BackendKeyWatcher::Status::Done);
    CHECK_FALSE(oversized.key().has_value());
    CHECK_FALSE(oversized.logged_in());

    BackendKeyWatcher refused;  // a failed login: ErrorResponse, then Postgres closes
    CHECK(refused.feed(message('E', text(cstrings({"SFATAL", "C28P01", "Mno", ""})))) ==
          BackendKeyWatcher::Status::Watching);
    CHECK_FALSE(refused.logged_in());
}

namespace {

// What a client's session may get from Postgres: a query's answer with two reports (a SET
// of a reported setting, a reload's new default) between other messages.
Bytes answer_with_reports() {
    BackendWriter before;
    before.row_description({"DateStyle"});
    before.data_row({"SQL, DMY"});
    before.command_complete("SHOW");
    before.parameter_status("DateStyle", "SQL, DMY");
    // A NoticeResponse, whose fields begin with 'S' (severity) too.
    const Bytes notice = message('N', text(cstrings({"SNOTICE", "C00000", "Ma notice", ""})));
    BackendWriter after;
    after.parameter_status("TimeZone", "Europe/Berlin");
    after.ready_for_query('I');
    return concat({before.take(), notice, after.take()});
}

using Reports = std::vector<std::pair<std::string, std::string>>;

// The follower as the session drives it: on the stream's own boundaries.
struct FollowedStream {
    MessageBoundaryTracker boundaries;
    ParameterStatusFollower follower;

    template <class OnStatus>
    void feed(std::span<const std::byte> bytes, OnStatus&& on_status) {
        (void)follower.walk(
            boundaries, bytes, [](char, size_t) { return true; }, on_status);
    }
    [[nodiscard]] bool broken() const { return follower.broken() || boundaries.broken(); }
};

}  // namespace

TEST_CASE("ParameterStatusFollower: every report once, in any pieces") {
    const Bytes stream = concat({answer_with_reports(), answer_with_reports()});
    const Reports expected = {{"DateStyle", "SQL, DMY"},
                              {"TimeZone", "Europe/Berlin"},
                              {"DateStyle", "SQL, DMY"},
                              {"TimeZone", "Europe/Berlin"}};
    for (size_t piece : {size_t{1}, size_t{2}, size_t{5}, size_t{7}, size_t{13}, stream.size()}) {
        INFO(piece);
        FollowedStream follower;
        Reports seen;
        for (size_t i = 0; i < stream.size(); i += piece)
            follower.feed(
                std::span(stream).subspan(i, std::min(piece, stream.size() - i)),
                [&](const std::string& n, const std::string& v) { seen.emplace_back(n, v); });
        CHECK(seen == expected);
        CHECK_FALSE(follower.broken());
    }
}

TEST_CASE("ParameterStatusFollower: a malformed or oversized report breaks it") {
    const auto follow = [](const Bytes& stream) {
        FollowedStream follower;
        size_t reports = 0;
        follower.feed(stream, [&](const std::string&, const std::string&) { ++reports; });
        return std::pair(follower.broken(), reports);
    };
    CHECK(follow(message('S', text(cstrings({"DateStyle"})))) == std::pair(true, size_t{0}));
    Bytes huge = message('S', std::string(ParameterStatusFollower::kMaxStatus, 'x'));
    CHECK(follow(huge).first);
    Bytes bad_length = message('Z', "I");
    write_be32(bad_length.data() + 1, 2);
    CHECK(follow(concat({bad_length, answer_with_reports()})).first);
    // A long message of another type is skipped, not collected.
    CHECK(follow(concat({message('D', std::string(1 << 20, 'y')), answer_with_reports()})) ==
          std::pair(false, size_t{2}));
}

TEST_CASE("PoolLoginCheck: passes only the same role and database, still allowed, in any pieces") {
    const Bytes request = PoolLoginCheck::request();
    REQUIRE(request.size() > kMessageHeaderSize);
    CHECK(static_cast<char>(request[0]) == 'Q');

    const Bytes passing = concat(
        {message('S', text(cstrings({"TimeZone", "UTC"}))),
         login_check_answer({"alice", "app", "t", "t", std::string(kSettings), "t", "t", "t"})});
    for (size_t piece = 1; piece <= passing.size(); ++piece) {
        PoolLoginCheck login_check = reuse_check();
        ServerGreeting greeting;
        PoolLoginCheck::Status status = PoolLoginCheck::Status::NeedMore;
        for (size_t i = 0; i < passing.size(); i += piece)
            status = login_check.feed(
                std::span(passing).subspan(i, std::min(piece, passing.size() - i)), greeting);
        CHECK(status == PoolLoginCheck::Status::Passed);
        REQUIRE(greeting.parameters.size() == 1);  // reported while idle: kept for the client
        CHECK(greeting.parameters[0].second == "UTC");
    }
    // Names as Postgres cuts them: the first 63 bytes.
    const std::string long_role(70, 'r');
    PoolLoginCheck cut = reuse_check(long_role);
    ServerGreeting greeting;
    CHECK(check(cut,
                login_check_answer({long_role.substr(0, 63), "app", "t", "t",
                                    std::string(kSettings), "t", "t", "t"}),
                greeting) == PoolLoginCheck::Status::Passed);
}

TEST_CASE("PoolLoginCheck: any other answer fails, and says why") {
    struct Case {
        Bytes answer;
        std::string_view why;
    };
    BackendWriter error;
    error.error("ERROR", "42501", "permission denied");
    error.ready_for_query('I');
    const std::string settings(kSettings);
    const Case cases[] = {
        {login_check_answer({"alice", "app", "f", "t", settings, "t", "t", "t"}),
         "may no longer log in"},
        {login_check_answer({"alice", "app", "t", "f", settings, "t", "t", "t"}),
         "CONNECTION LIMIT"},
        {login_check_answer({"alice", "app", "t", "t"}), "malformed row"},  // a column short
        {login_check_answer({"alice_old", "app", "t", "t", settings, "t", "t", "t"}), "renamed"},
        {login_check_answer({"alice", "app2", "t", "t", settings, "t", "t", "t"}), "renamed"},
        {login_check_answer({"alice", "app", "t", "t", "", "t", "t", "t"}),
         "(ALTER ROLE / ALTER DATABASE"},
        {login_check_answer(
             {"alice", "app", "t", "t", settings + ";0 0 {lock_timeout=1s}", "t", "t", "t"}),
         "changed since it started"},
        {login_check_answer({"alice", "app", "t", "t", "superuser " + settings, "t", "t", "t"}),
         "its SUPERUSER attribute, or the name of the role it runs as"},
        {login_check_answer({"alice", "app", "t", "t", settings, "f", "t", "t"}),
         "may no longer take the role it runs as"},
        {login_check_answer({"alice", "app", "t", "t", settings, "t", "f", "t"}),
         "superuser-only parameter"},
        {login_check_answer({"alice", "app", "t", "t", settings, "t", "t", "f"}),
         "login event trigger"},
        {login_check_answer({"alice", "app", "t", "t", settings, "t", "t"}),
         "malformed row"},  // a column short
        {login_check_answer({}, "SELECT 0"), "no longer exists"},
        {login_check_answer({"alice", "app", std::nullopt, "t", settings, "t", "t", "t"}),
         "malformed row"},
        {login_check_answer({"alice", "app", "t", "t", settings, "t", "t", "t"}, "SELECT 0"),
         "command tag"},
        {error.take(), "an error: permission denied"},
        {concat({login_check_answer({"alice", "app", "t", "t", settings, "t", "t", "t"}),
                 message('Z', "I")}),
         "after"},
        {concat({message('D', ""), message('Z', "I")}), "unexpected message"},
        {concat({message('C', text(cstrings({"SELECT 1"}))), message('Z', "I")}),
         "unexpected message 'C'"},
        {error_response("FATAL", "terminating connection"), "a FATAL error: terminating"},
    };
    for (const Case& c : cases) {
        PoolLoginCheck login_check = reuse_check();
        ServerGreeting greeting;
        CHECK(check(login_check, c.answer, greeting) == PoolLoginCheck::Status::Failed);
        CHECK_THAT(login_check.failure(), Catch::Contains(std::string(c.why)));
    }
    // Nothing may follow a passed check either.
    PoolLoginCheck passed = reuse_check();
    ServerGreeting greeting;
    REQUIRE(check(passed, login_check_answer({"alice", "app", "t", "t", settings, "t", "t", "t"}),
                  greeting) == PoolLoginCheck::Status::Passed);
    CHECK(check(passed, message('Z', "I"), greeting) == PoolLoginCheck::Status::Failed);
}

TEST_CASE(
    "PoolLoginCheck at the start: notes the settings, and leaves what follows to the client") {
    const std::string settings(kSettings);
    const Bytes pipelined = concat({message('C', text(cstrings({"SELECT 1"}))), message('Z', "I")});
    PoolLoginCheck at_start("alice", "app", PoolLoginCheck::Purpose::AtStart);
    ServerGreeting greeting;
    REQUIRE(check(at_start,
                  concat({login_check_answer({"alice", "app", "t", "t", settings, "t", "t", "t"}),
                          pipelined}),
                  greeting) == PoolLoginCheck::Status::Passed);
    CHECK(at_start.settings() == settings);
    CHECK(Bytes(at_start.rest().begin(), at_start.rest().end()) == pipelined);

    // An ERROR answers l5pgd's query: taken up to its ReadyForQuery, never the client's.
    BackendWriter denied;
    denied.error("ERROR", "42501", "permission denied for table pg_db_role_setting");
    denied.ready_for_query('I');
    PoolLoginCheck errored("alice", "app", PoolLoginCheck::Purpose::AtStart);
    CHECK(check(errored, concat({denied.take(), pipelined}), greeting) ==
          PoolLoginCheck::Status::Failed);
    CHECK_THAT(errored.failure(), Catch::Contains("permission denied for table"));
    CHECK(Bytes(errored.rest().begin(), errored.rest().end()) == pipelined);

    // Another answer than expected: taken up to its ReadyForQuery all the same, so that what
    // follows is Postgres's stream again; a broken frame cannot be followed.
    Bytes other =
        concat({message('T', std::string("\0\1x\0", 4)), message('C', "X\0"), message('Z', "I")});
    PoolLoginCheck unexpected("alice", "app", PoolLoginCheck::Purpose::AtStart);
    CHECK(check(unexpected, concat({other, pipelined}), greeting) ==
          PoolLoginCheck::Status::Failed);
    CHECK(unexpected.followed());
    CHECK(Bytes(unexpected.rest().begin(), unexpected.rest().end()) == pipelined);
    Bytes broken = message('T', "");
    write_be32(broken.data() + 1, 2);
    PoolLoginCheck lost("alice", "app", PoolLoginCheck::Purpose::AtStart);
    CHECK(check(lost, broken, greeting) == PoolLoginCheck::Status::Failed);
    CHECK_FALSE(lost.followed());

    // A FATAL (the backend terminated meanwhile) is the client's to see, as Postgres sent it.
    const Bytes fatal = error_response("FATAL", "terminating connection");
    Bytes without_ready = login_check_answer({"alice", "app", "t", "t", settings, "t", "t", "t"});
    without_ready.resize(without_ready.size() - 6);  // its ReadyForQuery
    for (const Bytes& before : {Bytes{}, without_ready}) {
        PoolLoginCheck ended("alice", "app", PoolLoginCheck::Purpose::AtStart);
        const Bytes answer = concat({before, fatal});
        CHECK(check(ended, answer, greeting) == PoolLoginCheck::Status::Failed);
        CHECK(ended.followed());
        CHECK(Bytes(ended.rest().begin(), ended.rest().end()) == fatal);
    }
}
