// Session (daemon/session*.cpp) through a loopback client end (loopback_client_end.hpp)
// and a real upstream socket where the test plays Postgres: state transitions, close
// reasons and whether they count as errors, backpressure both ways, a torn record, the
// client's departure with its last messages, a FATAL at shutdown. No client process, no
// Postgres: the worker's event base is driven by hand.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "daemon/session.hpp"
#include "daemon/settings.hpp"
#include "daemon/worker.hpp"
#include "tests/unit/daemon/loopback_client_end.hpp"
#include "transport/wait/wait_id.hpp"

namespace l5pg::daemon {

struct SessionProbe {
    static test::LoopbackClientEnd& use_loopback(Session& s) {
        auto end = std::make_unique<test::LoopbackClientEnd>(s);
        test::LoopbackClientEnd& ref = *end;
        s.switch_end(std::move(end));
        return ref;
    }
};

}  // namespace l5pg::daemon

using namespace std::chrono_literals;
using l5pg::daemon::Session;
using l5pg::daemon::SessionState;

namespace {

std::string be32(uint32_t v) {
    return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
            static_cast<char>(v)};
}

std::string startup_packet() {
    const std::string body =
        be32(196608) + std::string("user\0postgres\0database\0postgres\0\0", 33);
    return be32(static_cast<uint32_t>(4 + body.size())) + body;
}

std::string message(char type, std::string_view body) {
    return type + be32(static_cast<uint32_t>(4 + body.size())) + std::string(body);
}

std::string query(std::string_view sql) {
    return message('Q', std::string(sql) + '\0');
}

const std::string kTerminate = message('X', "");
const std::string kReady = message('Z', "I");

// Where Session connects: a Unix socket in a temporary directory; the test plays Postgres.
struct FakePostgres {
    FakePostgres() {
        char tmpl[] = "/tmp/l5pg-session-test-XXXXXX";
        REQUIRE(::mkdtemp(tmpl) != nullptr);
        dir = tmpl;
        listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        const std::string path = dir + "/.s.PGSQL." + std::to_string(port);
        std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
        REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
        REQUIRE(::listen(listener, 8) == 0);
    }
    ~FakePostgres() {
        if (conn >= 0)
            ::close(conn);
        ::close(listener);
        std::filesystem::remove_all(dir);
    }
    bool accept_pending() {
        pollfd p{listener, POLLIN, 0};
        if (::poll(&p, 1, 0) != 1)
            return false;
        conn = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        return conn >= 0;
    }
    // What Session sent so far (non-blocking); sets `eof` when Session shut its side.
    std::string received() {
        char buf[65536];
        for (;;) {
            const ssize_t n = ::recv(conn, buf, sizeof buf, MSG_DONTWAIT);
            if (n > 0) {
                got.append(buf, static_cast<size_t>(n));
                continue;
            }
            if (n == 0)
                eof = true;
            return got;
        }
    }
    void send(std::string_view bytes) {
        REQUIRE(::send(conn, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
                static_cast<ssize_t>(bytes.size()));
    }
    void hang_up() {
        ::close(conn);
        conn = -1;
    }

    std::string dir;
    uint16_t port = 5432;
    int listener = -1;
    int conn = -1;
    std::string got;
    bool eof = false;
};

// One Session on an unstarted worker, its client end a loopback, its upstream FakePostgres.
struct Harness {
    explicit Harness(std::function<void(l5pg::config::Config&)> tweak = {}) {
        spdlog::set_level(spdlog::level::off);  // the close lines are asserted, not read
        cfg.auth.local = l5pg::config::AuthMethod::Trust;
        cfg.upstream.unix_socket_dir = pg.dir;
        cfg.upstream.port = pg.port;
        cfg.limits.drain_timeout_ms = 300;
        if (tweak)
            tweak(cfg);
        store = std::make_unique<l5pg::daemon::SettingsStore>(
            std::make_shared<const l5pg::daemon::Settings>(cfg));
        admission = std::make_unique<l5pg::daemon::AdmissionState>(cfg.limits);
        worker = std::make_unique<l5pg::daemon::Worker>(0, *store, metrics, *admission);
        int sv[2];
        REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
        client_socket = sv[1];
        l5pg::daemon::AcceptedClient client;
        client.fd.reset(sv[0]);
        client.listener = l5pg::daemon::Transport::Unix;
        client.peer.local = true;
        client.peer.uid = ::getuid();
        client.peer.pid = ::getpid();
        session = std::make_unique<Session>(*worker, 7, std::move(client));
        session->start();
        end = &l5pg::daemon::SessionProbe::use_loopback(*session);
    }
    ~Harness() {
        session.reset();
        ::close(client_socket);
    }

    // One round of the worker: its events (upstream, timers), then its polling of the end.
    void turn() {
        (void)pg.accept_pending();
        event_base_loop(worker->base(), EVLOOP_NONBLOCK);
        (void)session->poll_channel();
    }
    bool turn_until(const std::function<bool()>& done, std::chrono::milliseconds limit = 3000ms) {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        while (!done()) {
            if (std::chrono::steady_clock::now() > deadline)
                return false;
            turn();
            std::this_thread::sleep_for(1ms);
        }
        return true;
    }
    // Startup through the end, to Forwarding with Postgres's first answer delivered.
    void log_in() {
        end->deliver(startup_packet());
        REQUIRE(turn_until([&] { return session->state() == SessionState::Forwarding; }));
        REQUIRE(turn_until([&] { return pg.received() == startup_packet(); }));
        pg.send(kReady);
        REQUIRE(turn_until([&] { return end->output() == kReady; }));
        (void)end->take();
    }
    double metric(std::string_view line_prefix) {
        const std::string text = metrics.render();
        const size_t at = text.find(line_prefix);
        if (at == std::string::npos)
            return -1;
        return std::atof(text.c_str() + at + line_prefix.size());
    }
    double unix_errors() { return metric("l5pg_session_errors_total{transport=\"unix\"} "); }

    FakePostgres pg;
    l5pg::config::Config cfg;
    l5pg::daemon::Metrics metrics;
    std::unique_ptr<l5pg::daemon::SettingsStore> store;
    std::unique_ptr<l5pg::daemon::AdmissionState> admission;
    std::unique_ptr<l5pg::daemon::Worker> worker;
    std::unique_ptr<Session> session;
    l5pg::test::LoopbackClientEnd* end = nullptr;
    int client_socket = -1;
};

bool contains(const std::string& haystack, std::string_view needle) {
    return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST_CASE("session: startup through the end, Connecting, then Forwarding", "[session]") {
    Harness h;
    CHECK(h.session->state() == SessionState::Startup);
    const std::string packet = startup_packet();
    h.end->deliver(packet.substr(0, 5));  // half a packet: still Startup
    h.turn();
    CHECK(h.session->state() == SessionState::Startup);
    h.end->deliver(packet.substr(5));
    REQUIRE(h.turn_until([&] { return h.session->state() == SessionState::Forwarding; }));
    REQUIRE(h.turn_until([&] { return h.pg.received() == packet; }));
    CHECK(h.end->pending_input() == 0);
}

TEST_CASE("session: the client's bytes reach Postgres in order through short peeks", "[session]") {
    Harness h;
    h.log_in();
    h.end->faults.max_peek = 3;
    const std::string q = query("select 1") + query("select 2");
    h.end->deliver(q);
    REQUIRE(h.turn_until([&] { return h.pg.received() == startup_packet() + q; }));
    CHECK(h.session->awaiting_upstream());
}

TEST_CASE("session: Postgres's bytes reach the client through short reservations", "[session]") {
    Harness h;
    h.log_in();
    h.end->faults.max_reserve = 5;
    const std::string answer = message('D', std::string(100, 'x')) + kReady;
    h.pg.send(answer);
    REQUIRE(h.turn_until([&] { return h.end->output() == answer; }));
    CHECK_FALSE(h.session->awaiting_upstream());
}

TEST_CASE("session: a full client end stops reading Postgres until the client makes room",
          "[session]") {
    Harness h;
    h.log_in();
    h.end->faults.capacity = 1000;
    const std::string big = message('D', std::string(5000, 'y'));
    h.pg.send(big);
    REQUIRE(h.turn_until([&] { return h.end->output().size() == 1000; }));
    for (int i = 0; i < 20; ++i)
        h.turn();
    CHECK(h.end->output().size() == 1000);  // nothing more while full
    std::string seen = h.end->take();
    REQUIRE(h.turn_until([&] {
        if (h.end->output().size() == 1000)
            seen += h.end->take();
        return seen.size() + h.end->output().size() == big.size();
    }));
    seen += h.end->take();
    CHECK(seen == big);
}

TEST_CASE("session: a torn record closes the session as an error", "[session]") {
    Harness h;
    h.log_in();
    const double before = h.unix_errors();
    h.end->tear();
    REQUIRE(h.turn_until([&] { return h.session->state() == SessionState::Closed; }));
    CHECK(h.end->closed_by_session);
    CHECK(h.end->close_was_error);
    CHECK(h.unix_errors() == before + 1);
}

TEST_CASE("session: a torn record during startup closes before any upstream connection",
          "[session]") {
    Harness h;
    h.end->deliver(startup_packet().substr(0, 6));
    h.turn();
    h.end->tear();
    REQUIRE(h.turn_until([&] { return h.session->state() == SessionState::Closed; }));
    for (int i = 0; i < 5; ++i)
        h.turn();
    CHECK(h.pg.conn < 0);  // Postgres never saw a connection
}

TEST_CASE("session: a departing client's last messages reach Postgres, then its EOF", "[session]") {
    Harness h;
    h.log_in();
    const double before = h.unix_errors();
    const std::string last = query("insert into t values (1)") + kTerminate;
    h.end->deliver(last);
    h.end->leave();
    REQUIRE(h.turn_until([&] {
        (void)h.pg.received();
        return h.pg.eof;
    }));
    CHECK(h.pg.got == startup_packet() + last);
    h.pg.hang_up();  // Postgres ends the backend at Terminate
    REQUIRE(h.turn_until([&] { return h.session->state() == SessionState::Closed; }));
    CHECK(h.unix_errors() == before);  // an orderly departure
    CHECK_FALSE(h.end->close_was_error);
}

TEST_CASE("session: a departure Postgres does not end within the drain timeout is closed",
          "[session]") {
    Harness h;
    h.log_in();
    h.end->leave();
    // Postgres keeps its end open (busy): the drain timer (300 ms here) ends the session.
    REQUIRE(h.turn_until([&] { return h.session->state() == SessionState::Closed; }, 3000ms));
    CHECK(h.pg.received() == startup_packet());
    CHECK(h.pg.eof);
}

TEST_CASE("session: Postgres hanging up closes the session after its last bytes, no error",
          "[session]") {
    Harness h;
    h.log_in();
    const double before = h.unix_errors();
    const std::string fatal = message('E', "SFATAL\0C57P01\0Mterminating\0\0");
    h.pg.send(fatal);
    h.pg.hang_up();
    REQUIRE(h.turn_until([&] { return h.session->state() == SessionState::Closed; }));
    CHECK(h.end->output() == fatal);
    CHECK(h.unix_errors() == before);
}

TEST_CASE("session: Postgres gone before the client's next message is not an error", "[session]") {
    Harness h;
    h.log_in();
    const double before = h.unix_errors();
    h.pg.hang_up();
    h.end->deliver(query("select 1"));  // a send to the closed upstream: EPIPE or EOF first
    REQUIRE(h.turn_until([&] { return h.session->state() == SessionState::Closed; }));
    CHECK(h.unix_errors() == before);
}

TEST_CASE("session: an invalid startup packet gets FATAL 08P01 and the session closes",
          "[session]") {
    Harness h;
    h.end->deliver(be32(7) + be32(3 << 16));  // shorter than any startup packet
    REQUIRE(h.turn_until([&] { return h.session->state() == SessionState::Closed; }));
    CHECK(h.end->output().front() == 'E');
    CHECK(contains(h.end->output(), "08P01"));
    CHECK(h.pg.conn < 0);
}

TEST_CASE("session: an unknown protocol version gets FATAL 0A000, as from Postgres", "[session]") {
    Harness h;
    h.end->deliver(be32(8) + be32(12345));
    REQUIRE(h.turn_until([&] { return h.session->state() == SessionState::Closed; }));
    CHECK(h.end->output().front() == 'E');
    CHECK(contains(h.end->output(), "0A000"));
    CHECK(contains(h.end->output(), "unsupported frontend protocol 0.12345"));
    CHECK(h.pg.conn < 0);
}

TEST_CASE("session: a refused client gets FATAL 28000 and no upstream connection", "[session]") {
    Harness h([](l5pg::config::Config& c) { c.auth.local = l5pg::config::AuthMethod::Reject; });
    h.end->deliver(startup_packet());
    REQUIRE(h.turn_until([&] { return h.session->state() == SessionState::Closed; }));
    CHECK(contains(h.end->output(), "28000"));
    for (int i = 0; i < 5; ++i)
        h.turn();
    CHECK(h.pg.conn < 0);
}

TEST_CASE("session: an unreachable Postgres gets the client FATAL 08006", "[session]") {
    Harness h([](l5pg::config::Config& c) { c.upstream.port = 1; });  // nobody listens
    h.end->deliver(startup_packet());
    REQUIRE(h.turn_until([&] { return h.session->state() == SessionState::Closed; }));
    CHECK(contains(h.end->output(), "08006"));
    CHECK(contains(h.end->output(), "could not connect"));
    CHECK_FALSE(contains(h.end->output(), h.pg.dir));  // the client learns why, not where
}

TEST_CASE("session: shutdown sends FATAL 57P01 at a message boundary", "[session]") {
    Harness h;
    h.log_in();
    h.session->terminate_for_shutdown();
    CHECK(h.session->state() == SessionState::Closed);
    CHECK(contains(h.end->output(), "57P01"));
    CHECK(h.end->closed_by_session);
}

TEST_CASE("session: shutdown in the middle of Postgres's message sends no FATAL", "[session]") {
    Harness h;
    h.log_in();
    const std::string row = message('D', std::string(50, 'z'));
    h.pg.send(row.substr(0, 20));
    REQUIRE(h.turn_until([&] { return h.end->output().size() == 20; }));
    h.session->terminate_for_shutdown();
    CHECK(h.session->state() == SessionState::Closed);
    CHECK(h.end->output() == row.substr(0, 20));  // the client's framing stays intact
}

TEST_CASE("session: the worker may block while Postgres's socket is full, not before",
          "[session]") {
    Harness h;
    h.log_in();
    h.end->deliver(query("select 1"));
    // Client data waiting and nothing blocking it: the worker must not sleep.
    CHECK(h.session->arm_before_block(l5pg::wait::kUnnamedWait));
    h.turn();
    CHECK_FALSE(h.session->arm_before_block(l5pg::wait::kUnnamedWait));  // forwarded: nothing to do
}

TEST_CASE("session: Postgres's full socket stops the client's input until it drains", "[session]") {
    Harness h;
    h.log_in();
    // Fill Postgres's receive buffer: it does not read.
    const std::string chunk = query(std::string(60000, 'q'));
    for (int i = 0; i < 200 && h.end->input_wanted; ++i) {
        h.end->deliver(chunk);
        h.turn();
    }
    REQUIRE_FALSE(h.end->input_wanted);
    CHECK(h.end->pending_input() > 0);
    CHECK_FALSE(h.session->arm_before_block(
        l5pg::wait::kUnnamedWait));  // input waits for the upstream, not the worker
    REQUIRE(h.turn_until(
        [&] {
            (void)h.pg.received();
            return h.end->pending_input() == 0;
        },
        10000ms));
    CHECK(h.end->input_wanted);
}

TEST_CASE("session: a refusal the client does not take ends at the startup timeout", "[session]") {
    Harness h([](l5pg::config::Config& c) { c.limits.startup_timeout_ms = 200; });
    h.end->faults.stalled = true;
    h.end->deliver(be32(8) + be32(12345));
    REQUIRE(h.turn_until([&] { return h.session->state() == SessionState::Refusing; }));
    CHECK(h.end->output().empty());  // the FATAL waits for the client
    REQUIRE(h.turn_until([&] { return h.session->state() == SessionState::Closed; }, 3000ms));
    CHECK(h.end->close_was_error);
}

TEST_CASE("session: state names", "[session]") {
    CHECK(l5pg::daemon::to_string(SessionState::Startup) == "startup");
    CHECK(l5pg::daemon::to_string(SessionState::Connecting) == "connecting");
    CHECK(l5pg::daemon::to_string(SessionState::Forwarding) == "forwarding");
    CHECK(l5pg::daemon::to_string(SessionState::Refusing) == "refusing");
    CHECK(l5pg::daemon::to_string(SessionState::Closed) == "closed");
}
