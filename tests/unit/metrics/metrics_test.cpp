#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "daemon/health.hpp"
#include "daemon/metrics.hpp"
#include "daemon/metrics_server.hpp"
#include "l5pg_version.hpp"

using Catch::Matchers::Contains;
using Catch::Matchers::EndsWith;
using Catch::Matchers::StartsWith;
using l5pg::daemon::Direction;
using l5pg::daemon::Health;
using l5pg::daemon::Metrics;
using l5pg::daemon::MetricsServer;
using l5pg::daemon::Transport;

namespace {

bool has_line(const std::string& text, const std::string& line) {
    return text.find("\n" + line + "\n") != std::string::npos ||
           text.compare(0, line.size() + 1, line + "\n") == 0;
}

// Minimal HTTP/1.0 client: sends one request, returns everything until the server closes.
std::string http_request(uint16_t port, const std::string& method, const std::string& path) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    timeval tv{5, 0};  // never hang the test run
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    const std::string request = method + " " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
    REQUIRE(::send(fd, request.data(), request.size(), 0) == ssize_t(request.size()));
    std::string response;
    char buf[4096];
    ssize_t n = 0;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) {
        response.append(buf, size_t(n));
    }
    ::close(fd);
    return response;
}

std::string http_get(uint16_t port, const std::string& path) {
    return http_request(port, "GET", path);
}

std::string body_of(const std::string& response) {
    const auto end = response.find("\r\n\r\n");
    return end == std::string::npos ? std::string() : response.substr(end + 4);
}

}  // namespace

TEST_CASE("zero-valued metrics render every label combination") {
    const Metrics m;
    const std::string text = m.render();
    for (const char* t : {"tcp", "unix", "shm", "rdma"}) {
        const std::string label = std::string("{transport=\"") + t + "\"}";
        CHECK(has_line(text, "l5pg_sessions_total" + label + " 0"));
        CHECK(has_line(text, "l5pg_sessions_active" + label + " 0"));
        CHECK(has_line(text, "l5pg_session_errors_total" + label + " 0"));
        for (const char* d : {"client_to_server", "server_to_client"}) {
            CHECK(has_line(text, std::string("l5pg_bytes_total{transport=\"") + t +
                                     "\",direction=\"" + d + "\"} 0"));
        }
    }
    CHECK(has_line(text, "l5pg_upgrades_total{result=\"accepted\"} 0"));
    CHECK(has_line(text, "l5pg_upgrades_total{result=\"declined\"} 0"));
    for (const char* name :
         {"l5pg_sessions_total", "l5pg_bytes_total", "l5pg_upgrades_total",
          "l5pg_upstream_connect_failures_total", "l5pg_startup_rejected_total",
          "l5pg_doorbells_total", "l5pg_doorbells_coalesced_total", "l5pg_doorbells_received_total",
          "l5pg_worker_blocks_total", "l5pg_session_errors_total"}) {
        INFO(name);
        CHECK_THAT(text, Contains(std::string("# HELP ") + name + " "));
        CHECK(has_line(text, std::string("# TYPE ") + name + " counter"));
    }
    CHECK(has_line(text, "# TYPE l5pg_sessions_active gauge"));
    CHECK(text.back() == '\n');
}

TEST_CASE("counters render their values") {
    Metrics m;
    m.session_opened(Transport::Tcp);
    m.session_opened(Transport::Shm);
    m.add_bytes(Transport::Unix, Direction::ClientToServer, 100);
    m.add_bytes(Transport::Unix, Direction::ServerToClient, 7);
    m.add_bytes(Transport::Unix, Direction::ServerToClient, 3);
    m.upgrade_accepted();
    m.upgrade_declined();
    m.upgrade_declined();
    m.session_error(Transport::Shm);
    m.upstream_connect_failed();
    m.startup_rejected();
    m.doorbell_sent();
    m.doorbell_sent();
    m.doorbell_sent();
    m.doorbell_coalesced();
    m.doorbells_received(5);
    m.doorbells_received(2);
    m.worker_blocked();
    const std::string text = m.render();
    CHECK(has_line(text, "l5pg_sessions_total{transport=\"tcp\"} 1"));
    CHECK(has_line(text, "l5pg_sessions_total{transport=\"unix\"} 0"));
    CHECK(has_line(text, "l5pg_sessions_total{transport=\"shm\"} 1"));
    CHECK(
        has_line(text, "l5pg_bytes_total{transport=\"unix\",direction=\"client_to_server\"} 100"));
    CHECK(has_line(text, "l5pg_bytes_total{transport=\"unix\",direction=\"server_to_client\"} 10"));
    CHECK(has_line(text, "l5pg_upgrades_total{result=\"accepted\"} 1"));
    CHECK(has_line(text, "l5pg_upgrades_total{result=\"declined\"} 2"));
    CHECK(has_line(text, "l5pg_session_errors_total{transport=\"shm\"} 1"));
    CHECK(has_line(text, "l5pg_upstream_connect_failures_total 1"));
    CHECK(has_line(text, "l5pg_startup_rejected_total 1"));
    CHECK(has_line(text, "l5pg_doorbells_total 3"));
    CHECK(has_line(text, "l5pg_doorbells_coalesced_total 1"));
    CHECK(has_line(text, "l5pg_doorbells_received_total 7"));
    CHECK(has_line(text, "l5pg_worker_blocks_total 1"));
}

TEST_CASE("active gauge goes up and down") {
    Metrics m;
    m.session_opened(Transport::Unix);
    m.session_opened(Transport::Unix);
    CHECK(has_line(m.render(), "l5pg_sessions_active{transport=\"unix\"} 2"));
    m.session_closed(Transport::Unix);
    CHECK(has_line(m.render(), "l5pg_sessions_active{transport=\"unix\"} 1"));
    m.session_closed(Transport::Unix);
    CHECK(has_line(m.render(), "l5pg_sessions_active{transport=\"unix\"} 0"));
    CHECK(has_line(m.render(), "l5pg_sessions_total{transport=\"unix\"} 2"));
}

TEST_CASE("to_string names") {
    CHECK(to_string(Transport::Tcp) == "tcp");
    CHECK(to_string(Transport::Unix) == "unix");
    CHECK(to_string(Transport::Shm) == "shm");
    CHECK(to_string(Transport::Rdma) == "rdma");
    CHECK(to_string(Direction::ClientToServer) == "client_to_server");
    CHECK(to_string(Direction::ServerToClient) == "server_to_client");
}

TEST_CASE("MetricsServer serves /metrics and 404s elsewhere") {
    Metrics m;
    const Health health;
    m.doorbell_sent();
    MetricsServer server("127.0.0.1", 0, m, health);
    REQUIRE(server.port() != 0);

    const std::string ok = http_get(server.port(), "/metrics");
    CHECK_THAT(ok, StartsWith("HTTP/1.0 200") || StartsWith("HTTP/1.1 200"));
    CHECK_THAT(ok, Contains("text/plain; version=0.0.4"));
    CHECK(body_of(ok) == m.render());

    m.doorbell_sent();  // later scrapes see new values
    CHECK(has_line(body_of(http_get(server.port(), "/metrics")), "l5pg_doorbells_total 2"));

    const std::string missing = http_get(server.port(), "/other");
    CHECK_THAT(missing, StartsWith("HTTP/1.0 404") || StartsWith("HTTP/1.1 404"));
}

TEST_CASE("MetricsServer answers /healthz and /readyz from Health") {
    const Metrics m;
    Health health;
    MetricsServer server("127.0.0.1", 0, m, health);
    const std::string starting = http_get(server.port(), "/readyz");
    CHECK_THAT(starting, Contains(" 503 "));
    CHECK(body_of(starting) == "starting\n");
    CHECK_THAT(http_get(server.port(), "/healthz"), Contains(" 200 "));
    health.started(Health::clock::now());
    const std::string ready = http_get(server.port(), "/readyz");
    CHECK_THAT(ready, Contains(" 200 "));
    CHECK(body_of(ready) == "ok\n");
    // A worker last seen long ago: not alive, so not ready either.
    const auto now = Health::clock::now();
    health.beat(now, now - Health::kStallLimit - std::chrono::seconds(2), 3);
    for (const char* path : {"/healthz", "/readyz"}) {
        const std::string stuck = http_get(server.port(), path);
        CHECK_THAT(stuck, Contains(" 503 "));
        CHECK_THAT(body_of(stuck), StartsWith("worker 3 has not gone round its event loop for "));
    }
    CHECK_THAT(http_get(server.port(), "/nothing"), Contains("try /metrics, /healthz or /readyz"));
}

TEST_CASE("MetricsServer answers HEAD with the GET's headers and no body") {
    Metrics m;
    Health health;
    health.started(Health::clock::now());
    MetricsServer server("127.0.0.1", 0, m, health);
    for (const char* path : {"/metrics", "/healthz", "/nothing"}) {
        const std::string get = http_get(server.port(), path);
        const std::string head = http_request(server.port(), "HEAD", path);
        CHECK(head.substr(0, head.find("\r\n")) == get.substr(0, get.find("\r\n")));
        CHECK(body_of(head).empty());
        CHECK_THAT(head, Contains("Content-Length: " + std::to_string(body_of(get).size())));
    }
}

TEST_CASE("Health: starting, beating, stalled, draining, stopping") {
    using namespace std::chrono_literals;
    Health health;
    const Health::clock::time_point t0 = Health::clock::now();
    CHECK(health.liveness(t0).ok);  // before the listeners accept: alive, not ready
    CHECK(health.liveness(t0).text == "ok (starting)");
    CHECK_FALSE(health.readiness(t0).ok);
    // Starting for longer than the limit: stuck (a device that does not answer).
    CHECK_FALSE(health.liveness(t0 + Health::kStallLimit + 1s).ok);
    CHECK_THAT(health.liveness(t0 + Health::kStallLimit + 1s).text,
               StartsWith("still starting after"));

    health.started(t0);
    CHECK(health.readiness(t0 + 1s).ok);
    // No beat for longer than the limit: the main thread's loop is stuck.
    const Health::Verdict main_stuck = health.liveness(t0 + Health::kStallLimit + 1s);
    CHECK_FALSE(main_stuck.ok);
    CHECK_THAT(main_stuck.text, StartsWith("the main thread has not gone round"));
    CHECK_FALSE(health.readiness(t0 + Health::kStallLimit + 1s).ok);

    // Beats go on, but worker 1 was last seen at t0.
    const auto late = t0 + Health::kStallLimit + 1s;
    health.beat(late, t0, 1);
    CHECK_FALSE(health.liveness(late).ok);
    CHECK_THAT(health.liveness(late).text, StartsWith("worker 1 has not gone round") &&
                                               Contains(fmt::format("for {} s", (late - t0) / 1s)));
    health.beat(late + 1s, late + 1s, 0);  // it went round again
    const auto now = late + 1s;
    CHECK(health.liveness(now).ok);
    CHECK(health.liveness(now + Health::kStallLimit).ok);  // exactly the limit: still alive

    health.draining();
    CHECK(health.liveness(now).ok);
    CHECK(health.liveness(now).text == "ok (draining)");
    CHECK_FALSE(health.readiness(now).ok);
    CHECK(health.readiness(now).text == "draining: new sessions are refused");

    // The main loop has ended: no more beats, and nothing to restart while the workers may
    // still be ending (here 5 s for RDMA channels, and the stall limit).
    health.stopping(now, 5s);
    health.joining(1);
    const auto allowed = 5s + Health::kStallLimit;
    CHECK(health.liveness(now + allowed).ok);
    CHECK(health.liveness(now).text == "ok (stopping)");
    CHECK(health.readiness(now).text == "stopping");
    // Beyond that, a worker is stuck and l5pgd will not end by itself.
    const Health::Verdict stuck = health.liveness(now + allowed + 1s);
    CHECK_FALSE(stuck.ok);
    CHECK(stuck.text == fmt::format("stopping for {} s (limit {} s): worker 1 has not ended",
                                    (allowed + 1s) / 1s, allowed / 1s));
    CHECK_FALSE(health.readiness(now + allowed + 1s).ok);
    health.joining(-1);  // every worker ended; the main thread's teardown is what hangs
    CHECK_THAT(health.liveness(now + allowed + 1s).text,
               EndsWith(": the main thread has not finished stopping"));
}

TEST_CASE("MetricsServer reports bind conflicts") {
    const Metrics m;
    const Health health;
    MetricsServer first("127.0.0.1", 0, m, health);
    const std::string where = "127.0.0.1:" + std::to_string(first.port());
    CHECK_THROWS_WITH(
        MetricsServer("127.0.0.1", first.port(), m, health),
        StartsWith("cannot listen for metrics on " + where + ": ") && Contains("in use"));
}

TEST_CASE("MetricsServer starts and stops quickly, repeatedly") {
    const Metrics m;
    const Health health;
    for (int i = 0; i < 20; ++i) {
        MetricsServer server("127.0.0.1", 0, m, health);  // destroyed right away: must not hang
        if (i % 5 == 0)                                   // and each one serves while it lives
            CHECK_THAT(http_get(server.port(), "/metrics"), Contains(" 200 "));
    }
}

TEST_CASE("Metrics: round-trip histogram is cumulative, with sum, count and build info") {
    Metrics m;
    using namespace std::chrono;
    m.observe_round_trip(Transport::Shm, microseconds(30));   // <= 50 us
    m.observe_round_trip(Transport::Shm, microseconds(700));  // <= 1 ms
    m.observe_round_trip(Transport::Shm, seconds(9));         // +Inf only
    const std::string text = m.render();
    CHECK(
        has_line(text, R"(l5pg_upstream_round_trip_seconds_bucket{transport="shm",le="5e-05"} 1)"));
    CHECK(has_line(text,
                   R"(l5pg_upstream_round_trip_seconds_bucket{transport="shm",le="0.0005"} 1)"));
    CHECK(
        has_line(text, R"(l5pg_upstream_round_trip_seconds_bucket{transport="shm",le="0.001"} 2)"));
    CHECK(has_line(text, R"(l5pg_upstream_round_trip_seconds_bucket{transport="shm",le="5"} 2)"));
    CHECK(
        has_line(text, R"(l5pg_upstream_round_trip_seconds_bucket{transport="shm",le="+Inf"} 3)"));
    CHECK(has_line(text, R"(l5pg_upstream_round_trip_seconds_count{transport="shm"} 3)"));
    CHECK(has_line(text, R"(l5pg_upstream_round_trip_seconds_sum{transport="shm"} 9.000730000)"));
    CHECK(has_line(text, R"(l5pg_upstream_round_trip_seconds_count{transport="tcp"} 0)"));
    CHECK(has_line(text, "# TYPE l5pg_upstream_round_trip_seconds histogram"));
    CHECK(has_line(text, std::string(R"(l5pg_build_info{version=")") + L5PG_VERSION + "\"} 1"));
}

TEST_CASE("database metrics: off by default, nothing rendered") {
    Metrics m;
    CHECK(m.databases().counters_for("app", "alice") == nullptr);
    CHECK_THAT(m.render(), !Contains("l5pg_database_"));
}

TEST_CASE("database metrics: per database and user, names escaped") {
    Metrics m;
    m.databases().configure(l5pg::config::MetricsLabels::DatabaseUser, 10);
    l5pg::daemon::DatabaseCounters* app = m.databases().counters_for("app", "alice");
    REQUIRE(app != nullptr);
    CHECK(m.databases().counters_for("app", "alice") == app);  // one series per label set
    app->opened();
    app->opened();
    app->add_bytes(Direction::ClientToServer, 40);
    app->add_bytes(Direction::ServerToClient, 2);
    app->closed(/*error=*/true);
    l5pg::daemon::DatabaseCounters* odd = m.databases().counters_for("we\"ird\\db", "x\ny");
    REQUIRE(odd != nullptr);
    odd->opened();
    const std::string text = m.render();
    const std::string alice = "database=\"app\",user=\"alice\"";
    CHECK(has_line(text, "l5pg_database_sessions_total{" + alice + "} 2"));
    CHECK(has_line(text, "l5pg_database_sessions_active{" + alice + "} 1"));
    CHECK(has_line(text,
                   "l5pg_database_bytes_total{" + alice + ",direction=\"client_to_server\"} 40"));
    CHECK(has_line(text,
                   "l5pg_database_bytes_total{" + alice + ",direction=\"server_to_client\"} 2"));
    CHECK(has_line(text, "l5pg_database_session_errors_total{" + alice + "} 1"));
    CHECK(has_line(text,
                   "l5pg_database_sessions_total{database=\"we\\\"ird\\\\db\",user=\"x\\ny\"} 1"));
    CHECK(has_line(text, "# TYPE l5pg_database_sessions_active gauge"));
    CHECK(has_line(text, "l5pg_database_sessions_unlabeled_total 0"));
}

TEST_CASE("database metrics: database labels only, and the limit") {
    Metrics m;
    m.databases().configure(l5pg::config::MetricsLabels::Database, 2);
    l5pg::daemon::DatabaseCounters* a = m.databases().counters_for("a", "alice");
    CHECK(m.databases().counters_for("a", "bob") == a);  // users share their database's series
    CHECK(m.databases().counters_for("b", "bob") != nullptr);
    CHECK(m.databases().counters_for("c", "carol") == nullptr);  // beyond label_limit
    CHECK(m.databases().counters_for("c", "carol") == nullptr);
    CHECK(m.databases().counters_for("b", "alice") != nullptr);  // known sets go on
    const std::string text = m.render();
    CHECK(has_line(text, "l5pg_database_sessions_total{database=\"a\"} 0"));
    CHECK(has_line(text, "l5pg_database_sessions_total{database=\"b\"} 0"));
    CHECK_THAT(text, !Contains("database=\"c\""));
    CHECK_THAT(text, !Contains("user="));
    CHECK(has_line(text, "l5pg_database_sessions_unlabeled_total 2"));
}

TEST_CASE("database metrics: names as Postgres serves them, valid UTF-8 in the text") {
    Metrics m;
    m.databases().configure(l5pg::config::MetricsLabels::Database, 10);
    const std::string long_name(63, 'd');
    // Postgres cuts names to 63 bytes: these are one database.
    CHECK(m.databases().counters_for(long_name + "x", "u") ==
          m.databases().counters_for(long_name + "y", "u"));
    REQUIRE(m.databases().counters_for("caf\xC3\xA9", "u") != nullptr);     // UTF-8 é
    REQUIRE(m.databases().counters_for("caf\xE9", "u") != nullptr);         // LATIN1 é
    REQUIRE(m.databases().counters_for("x\xED\xA0\x80y", "u") != nullptr);  // a surrogate
    // Names that show alike are one series: a label set appears once in the scrape.
    CHECK(m.databases().counters_for("caf\xE8", "u") == m.databases().counters_for("caf\xE9", "u"));
    const std::string text = m.render();
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        lines.push_back(line);
    CHECK(std::set<std::string>(lines.begin(), lines.end()).size() == lines.size());
    CHECK(has_line(text, "l5pg_database_sessions_total{database=\"" + long_name + "\"} 0"));
    CHECK(has_line(text, "l5pg_database_sessions_total{database=\"caf\xC3\xA9\"} 0"));
    CHECK(has_line(text, "l5pg_database_sessions_total{database=\"caf\xEF\xBF\xBD\"} 0"));
    CHECK(has_line(
        text,
        "l5pg_database_sessions_total{database=\"x\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDy\"} 0"));
}
