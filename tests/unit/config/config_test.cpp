#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <string>

#include "config/config.hpp"

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using l5pg::config::Config;
using l5pg::config::ConfigError;
using l5pg::config::load;
using l5pg::config::load_from_string;
using l5pg::config::parse_host_port;

namespace {

// The ConfigError message for `yaml` + `overrides`, or "" when it loads fine.
std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
    try {
        (void)load_from_string(yaml, overrides);
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "";
}

std::string override_error(const std::string& item) {
    return error_of("", {item});
}

}  // namespace

TEST_CASE("defaults match the header") {
    const Config c = load("", {});
    CHECK(c.listen.unix_socket_dir == "/var/run/l5pg");
    CHECK(c.listen.port == 6432);
    CHECK(c.listen.tcp_address == "127.0.0.1");
    CHECK(c.listen.backlog == 4096);
    CHECK(c.listen.unix_socket_mode == 0777);
    CHECK(c.upstream.unix_socket_dir == "/var/run/postgresql");
    CHECK(c.upstream.host.empty());
    CHECK(c.upstream.port == 5432);
    CHECK(c.upstream.connect_timeout_ms == 5000);
    CHECK(c.upstream.dns_max_ttl_ms == 15000);
    CHECK(c.workers.count == 2);
    CHECK(c.workers.cpu_affinity.empty());
    CHECK(c.shm.enabled);
    CHECK(c.shm.max_ring_size == (uint64_t{16} << 20));
    CHECK(c.shm.spin_us == 50);
    CHECK(c.shm.yield_us == 200);
    CHECK_FALSE(c.shm.spin_awaiting_upstream);
    CHECK(c.shm.block_when_crowded);
    CHECK(c.shm.follow_client_cpu);
    CHECK(c.metrics.listen == "127.0.0.1:6439");
    CHECK(c.limits.max_sessions == 1000);
    CHECK(c.limits.startup_timeout_ms == 10000);
    CHECK(c.limits.session_buffer_bytes == 256 * 1024);
    CHECK(c.limits.drain_timeout_ms == 10000);
    CHECK(c.logging.level == "info");
}

TEST_CASE("empty document and empty sections keep defaults") {
    CHECK(load_from_string("", {}).listen.port == 6432);
    CHECK(load_from_string("# only a comment\n", {}).listen.port == 6432);
    CHECK(load_from_string("listen:\n", {}).listen.port == 6432);
}

TEST_CASE("every section parses") {
    const Config c = load_from_string(R"(
listen:
  unix_socket_dir: /tmp/l5
  port: 7000
  tcp_address: "::1"
  backlog: 64
  unix_socket_mode: 0770
upstream:
  unix_socket_dir: /tmp/pg
  host: db.example
  port: 5433
  connect_timeout_ms: 1500
  dns_max_ttl_ms: 0
workers:
  count: 8
  cpu_affinity: [2, 3]
shm:
  enabled: false
  max_ring_size: 4096
  spin_us: 0
  yield_us: 10
  spin_awaiting_upstream: true
  block_when_crowded: false
  follow_client_cpu: false
metrics:
  listen: "[::1]:0"
  labels: database_user
  label_limit: 7
limits:
  max_sessions: 5
  startup_timeout_ms: 250
  session_buffer_bytes: 65536
  drain_timeout_ms: 750
logging:
  level: debug
)",
                                      {});
    CHECK(c.listen.unix_socket_dir == "/tmp/l5");
    CHECK(c.listen.port == 7000);
    CHECK(c.listen.tcp_address == "::1");
    CHECK(c.listen.backlog == 64);
    CHECK(c.listen.unix_socket_mode == 0770);
    CHECK(c.upstream.unix_socket_dir == "/tmp/pg");
    CHECK(c.upstream.host == "db.example");
    CHECK(c.upstream.port == 5433);
    CHECK(c.upstream.connect_timeout_ms == 1500);
    CHECK(c.upstream.dns_max_ttl_ms == 0);
    CHECK(c.workers.count == 8);
    CHECK(c.workers.cpu_affinity == std::vector<int>{2, 3});
    CHECK_FALSE(c.shm.enabled);
    CHECK(c.shm.max_ring_size == 4096);
    CHECK(c.shm.spin_us == 0);
    CHECK(c.shm.yield_us == 10);
    CHECK(c.shm.spin_awaiting_upstream);
    CHECK_FALSE(c.shm.block_when_crowded);
    CHECK_FALSE(c.shm.follow_client_cpu);
    CHECK(c.metrics.listen == "[::1]:0");
    CHECK(c.metrics.labels == l5pg::config::MetricsLabels::DatabaseUser);
    CHECK(c.metrics.label_limit == 7);
    CHECK(c.limits.max_sessions == 5);
    CHECK(c.limits.startup_timeout_ms == 250);
    CHECK(c.limits.session_buffer_bytes == 65536);
    CHECK(c.limits.drain_timeout_ms == 750);
    CHECK(c.logging.level == "debug");
}

TEST_CASE("unknown keys and sections are named") {
    CHECK_THAT(error_of("listen:\n  prot: 1\n"), StartsWith("listen.prot: unknown key"));
    CHECK_THAT(error_of("listen:\n  prot: 1\n"), Contains("line 2"));
    CHECK_THAT(error_of("lsten:\n  port: 1\n"), StartsWith("lsten: unknown section"));
    CHECK_THAT(error_of("listen:\n  port: 1\n  port: 2\n"),
               StartsWith("listen.port: duplicate key"));
    CHECK_THAT(error_of("listen: 5\n"), StartsWith("listen: must be a mapping"));
    CHECK_THAT(error_of("- a\n- b\n"), Contains("top level must be a mapping"));
}

TEST_CASE("wrong types are named") {
    CHECK_THAT(error_of("listen:\n  port: abc\n"),
               StartsWith("listen.port: must be an integer between 1 and 65535 (got 'abc')"));
    CHECK_THAT(error_of("listen:\n  port: 12x\n"), StartsWith("listen.port: must be an integer"));
    CHECK_THAT(error_of("listen:\n  port: [1]\n"), Contains("(got a sequence)"));
    CHECK_THAT(error_of("listen:\n  tcp_address: {a: 1}\n"),
               StartsWith("listen.tcp_address: must be a string (got a mapping)"));
    CHECK_THAT(error_of("shm:\n  enabled: maybe\n"), StartsWith("shm.enabled: must be true"));
    CHECK_THAT(error_of("workers:\n  cpu_affinity: 3\n"),
               StartsWith("workers.cpu_affinity: must be a list"));
    CHECK_THAT(error_of("workers:\n  cpu_affinity: [0, x]\n"),
               StartsWith("workers.cpu_affinity[1]: must be an integer"));
    CHECK_THAT(error_of("", {"metrics.listen=[::1]:6439"}),
               Contains("quote a value that begins with '['"));
    CHECK_THAT(error_of("listen:\n  unix_socket_mode: \"0789\"\n"),
               StartsWith("listen.unix_socket_mode: must be a file mode"));
    // Decimal 770 is 01402: the socket's owner could not connect. At most 0777, as Postgres's
    // unix_socket_permissions.
    CHECK_THAT(error_of("listen:\n  unix_socket_mode: 770\n"),
               Contains("(got '770', decimal: 01402)"));
    CHECK_THAT(error_of("listen:\n  unix_socket_mode: \"01777\"\n"),
               StartsWith("listen.unix_socket_mode: must be a file mode between 0000 and 0777"));
}

TEST_CASE("range errors") {
    CHECK_THAT(error_of("listen:\n  port: 70000\n"), StartsWith("listen.port: must be"));
    CHECK_THAT(error_of("listen:\n  port: 0\n"), StartsWith("listen.port: must be"));
    CHECK_THAT(error_of("upstream:\n  port: -1\n"), StartsWith("upstream.port: must be"));
    CHECK_THAT(error_of("workers:\n  count: 0\n"), StartsWith("workers.count: must be"));
    CHECK_THAT(error_of("workers:\n  count: 257\n"), StartsWith("workers.count: must be"));
    CHECK(error_of("workers:\n  count: 256\n").empty());
    CHECK_THAT(error_of("shm:\n  max_ring_size: 5000\n"),
               StartsWith("shm.max_ring_size: must be a power of two"));
    CHECK_THAT(error_of("shm:\n  max_ring_size: 2048\n"), StartsWith("shm.max_ring_size:"));
    CHECK_THAT(error_of("shm:\n  max_ring_size: 536870912\n"), StartsWith("shm.max_ring_size:"));
    CHECK(error_of("shm:\n  max_ring_size: 268435456\n").empty());
    CHECK_THAT(error_of("limits:\n  max_sessions: 0\n"), StartsWith("limits.max_sessions:"));
    CHECK_THAT(error_of("limits:\n  session_buffer_bytes: 1024\n"),
               StartsWith("limits.session_buffer_bytes:"));
    CHECK_THAT(error_of("limits:\n  startup_timeout_ms: 0\n"),
               StartsWith("limits.startup_timeout_ms:"));
    CHECK_THAT(error_of("limits:\n  drain_timeout_ms: 0\n"),
               StartsWith("limits.drain_timeout_ms:"));
    CHECK_THAT(error_of("upstream:\n  connect_timeout_ms: 0\n"),
               StartsWith("upstream.connect_timeout_ms:"));
    CHECK_THAT(error_of("logging:\n  level: verbose\n"),
               StartsWith("logging.level: must be one of"));
    CHECK_THAT(error_of("metrics:\n  listen: nohostport\n"), StartsWith("metrics.listen:"));
    CHECK(error_of("metrics:\n  listen: \"\"\n").empty());
    CHECK(error_of("metrics:\n  listen: 127.0.0.1:0\n").empty());
    CHECK_THAT(error_of("metrics:\n  labels: role\n"),
               StartsWith("metrics.labels: must be one of none, database, database_user"));
    CHECK_THAT(error_of("metrics:\n  label_limit: 0\n"), StartsWith("metrics.label_limit:"));
}

TEST_CASE("cross-field validation") {
    CHECK_THAT(error_of("listen:\n  unix_socket_dir: \"\"\n  tcp_address: \"\"\n"),
               StartsWith("listen.tcp_address:"));
    CHECK(error_of("listen:\n  unix_socket_dir: \"\"\n").empty());
    CHECK(error_of("listen:\n  tcp_address: \"\"\n").empty());
    CHECK_THAT(error_of("upstream:\n  unix_socket_dir: \"\"\n"),
               StartsWith("upstream.unix_socket_dir:"));
}

TEST_CASE("overrides apply after the file") {
    const Config c = load_from_string(
        "listen:\n  port: 7000\n",
        {"listen.port=6433", "workers.cpu_affinity=[0,1]", "listen.unix_socket_mode=0770",
         "shm.enabled=false", "listen.tcp_address=", "upstream.host=db:x=y"});
    CHECK(c.listen.port == 6433);
    CHECK(c.workers.cpu_affinity == std::vector<int>{0, 1});
    CHECK(c.listen.unix_socket_mode == 0770);
    CHECK_FALSE(c.shm.enabled);
    CHECK(c.listen.tcp_address.empty());
    CHECK(c.upstream.host == "db:x=y");  // split at the first '=' only
    CHECK(load_from_string("", {"listen.unix_socket_mode=504"}).listen.unix_socket_mode == 0770);
    CHECK(load_from_string("", {"workers.cpu_affinity=[]"}).workers.cpu_affinity.empty());
    CHECK(load_from_string("", {"listen.port=1", "listen.port=2"}).listen.port == 2);
}

TEST_CASE("bad overrides are named") {
    CHECK_THAT(override_error("foo"), Contains("'foo'"));
    CHECK_THAT(override_error("=1"), Contains("'=1'"));
    CHECK_THAT(override_error("port=1"), Contains("'port=1'"));
    CHECK_THAT(override_error("listen.=1"), Contains("'listen.=1'"));
    CHECK_THAT(override_error("listen.prot=1"), StartsWith("listen.prot: unknown key"));
    CHECK_THAT(override_error("nope.port=1"), StartsWith("nope.port: unknown section"));
    CHECK_THAT(override_error("listen.port=abc"),
               StartsWith("listen.port: must be an integer between 1 and 65535 (got 'abc')"));
    CHECK_THAT(override_error("listen.port=abc"), Contains("override 'listen.port=abc'"));
    CHECK_THAT(override_error("workers.cpu_affinity=[0,1"),
               StartsWith("workers.cpu_affinity: invalid YAML value"));
}

TEST_CASE("parse_host_port") {
    using P = std::pair<std::string, uint16_t>;
    CHECK(parse_host_port("k", "127.0.0.1:9187") == P{"127.0.0.1", 9187});
    CHECK(parse_host_port("k", "localhost:0") == P{"localhost", 0});
    CHECK(parse_host_port("k", "[::1]:9187") == P{"::1", 9187});
    CHECK(parse_host_port("k", "[fe80::1%eth0]:80") == P{"fe80::1%eth0", 80});
    for (const char* bad : {"", "host", "host:", ":80", "host:abc", "host:65536", "host:-1",
                            "::1:80", "[::1]", "[::1]80", "[]:80", "host:99999999999"}) {
        INFO(bad);
        CHECK_THROWS_WITH(parse_host_port("metrics.listen", bad), StartsWith("metrics.listen: "));
    }
}

TEST_CASE("files: missing, syntax error, example") {
    CHECK_THROWS_WITH(
        load("/nonexistent/l5pgd.yaml", {}),
        StartsWith("/nonexistent/l5pgd.yaml: cannot open: ") && Contains("No such file"));
    CHECK_THROWS_WITH(load("/", {}), StartsWith("/: cannot read: "));
    CHECK_THROWS_WITH(load_from_string("listen:\n  port: [1, 2\n", {}),
                      Contains("YAML syntax error at line"));

    const std::string path = "/tmp/l5pg_config_test_" + std::to_string(::getpid()) + ".yaml";
    {
        std::ofstream out(path);
        out << "listen:\n  port: 6500\n  bad: [\n";
    }
    CHECK_THROWS_WITH(load(path, {}), StartsWith(path + ": YAML syntax error at line"));
    {
        std::ofstream out(path);
        out << "listen:\n  port: 6500\n";
    }
    CHECK(load(path, {"workers.count=3"}).listen.port == 6500);
    {
        std::ofstream out(path);
        out << "# everything commented out\n";
    }
    CHECK(load(path, {}).listen.port == 6432);
    CHECK_THROWS_WITH(load(path, {}, l5pg::config::EmptyFile::Refuse),
                      StartsWith(path + ": no settings (empty, or only comments)"));
    std::remove(path.c_str());

    const Config example = load(L5PG_SOURCE_DIR "/config/l5pgd.example.yaml", {});
    const Config defaults = load("", {});
    CHECK(example.listen.port == defaults.listen.port);
    CHECK(example.listen.unix_socket_mode == defaults.listen.unix_socket_mode);
    CHECK(example.shm.max_ring_size == defaults.shm.max_ring_size);
    CHECK(example.metrics.listen == defaults.metrics.listen);
    CHECK(example.metrics.labels == defaults.metrics.labels);
    CHECK(example.metrics.label_limit == defaults.metrics.label_limit);
    CHECK(example.upstream.host == defaults.upstream.host);
    CHECK(example.logging.level == defaults.logging.level);
}

TEST_CASE("rdma section") {
    const Config d = load("", {});
    CHECK_FALSE(d.rdma.enabled);
    CHECK(d.rdma.device == "auto");
    CHECK(d.rdma.device_name.empty());
    CHECK(d.rdma.device_port == 1);
    CHECK(d.rdma.gid_index == -1);
    CHECK(d.rdma.max_ring_size == (uint64_t{16} << 20));
    CHECK(d.rdma.completion_timeout_ms == 10000);
    CHECK(d.rdma.soft_port == 0);
    CHECK(d.rdma.max_memory == (uint64_t{1} << 30));

    const Config c = load_from_string(R"(
rdma:
  enabled: true
  device: verbs
  device_name: mlx5_0
  device_port: 2
  gid_index: 3
  max_ring_size: 65536
  max_memory: 131072
  completion_timeout_ms: 500
  soft_port: 7433
)",
                                      {});
    CHECK(c.rdma.enabled);
    CHECK(c.rdma.device == "verbs");
    CHECK(c.rdma.device_name == "mlx5_0");
    CHECK(c.rdma.device_port == 2);
    CHECK(c.rdma.gid_index == 3);
    CHECK(c.rdma.max_ring_size == 65536);
    CHECK(c.rdma.completion_timeout_ms == 500);
    CHECK(c.rdma.soft_port == 7433);
    CHECK(c.rdma.max_memory == 131072);
    CHECK_THAT(error_of("rdma:\n  max_memory: 131071\n"),
               StartsWith("rdma.max_memory: must hold one session with the largest rings "
                          "(2 x rdma.max_ring_size = 33554432)"));
    CHECK_THAT(error_of("rdma:\n  max_memory: 100\n"), StartsWith("rdma.max_memory: must be"));

    const Config o = load_from_string("", {"rdma.enabled=true", "rdma.device=soft"});
    CHECK(o.rdma.enabled);
    CHECK(o.rdma.device == "soft");

    CHECK_THAT(error_of("rdma:\n  device: rxe\n"),
               StartsWith("rdma.device: must be one of auto, verbs, soft (got 'rxe')"));
    CHECK_THAT(error_of("rdma:\n  enabled: yes please\n"),
               StartsWith("rdma.enabled: must be true"));
    CHECK_THAT(error_of("rdma:\n  device_port: 0\n"), StartsWith("rdma.device_port: must be"));
    CHECK_THAT(error_of("rdma:\n  device_port: 256\n"), StartsWith("rdma.device_port: must be"));
    CHECK_THAT(error_of("rdma:\n  gid_index: -2\n"), StartsWith("rdma.gid_index: must be"));
    CHECK_THAT(error_of("rdma:\n  max_ring_size: 3000\n"),
               StartsWith("rdma.max_ring_size: must be a power of two"));
    CHECK_THAT(error_of("rdma:\n  completion_timeout_ms: 0\n"),
               StartsWith("rdma.completion_timeout_ms: must be"));
    CHECK_THAT(error_of("rdma:\n  soft_port: 65536\n"), StartsWith("rdma.soft_port: must be"));
    CHECK_THAT(error_of("rdma:\n  devise: soft\n"), StartsWith("rdma.devise: unknown key"));
    CHECK_THAT(error_of("rdma:\n  enabled: true\nlisten:\n  tcp_address: \"\"\n"),
               StartsWith("rdma.enabled: needs the TCP listener"));
    CHECK(error_of("rdma:\n  enabled: false\nlisten:\n  tcp_address: \"\"\n").empty());
}

TEST_CASE("auth defaults are the safe ones") {
    const Config c = load("", {});
    CHECK(c.auth.local == l5pg::config::AuthMethod::Peer);
    CHECK(c.auth.tcp == l5pg::config::AuthMethod::Reject);
    CHECK(c.auth.ident_file.empty());
    CHECK_FALSE(c.auth.upstream_authenticates);
    CHECK(c.limits.max_startup_sessions == 500);
    CHECK(c.limits.max_startup_per_peer == 100);
}

TEST_CASE("auth methods are validated per transport") {
    CHECK(load("", {"auth.tcp=trust"}).auth.tcp == l5pg::config::AuthMethod::Trust);
    CHECK(load("", {"auth.local=reject"}).auth.local == l5pg::config::AuthMethod::Reject);
    CHECK_THAT(override_error("auth.tcp=peer"), Contains("peer needs a Unix socket"));
    CHECK_THAT(override_error("auth.local=md5"),
               Contains("must be one of peer, trust, passthrough, reject"));
}

TEST_CASE("passthrough needs the operator's word that Postgres authenticates l5pgd") {
    CHECK_THAT(override_error("auth.local=passthrough"),
               StartsWith("auth.local: passthrough lets PostgreSQL authenticate clients"));
    CHECK_THAT(override_error("auth.tcp=passthrough"),
               Contains("auth.upstream_authenticates=true"));
    CHECK(error_of("auth:\n  tcp: passthrough\n  upstream_authenticates: true\n").empty());
}

TEST_CASE("tls: disabled by default; allow and require need a certificate and key") {
    CHECK(load("", {}).tls.mode == l5pg::config::TlsMode::Disable);
    CHECK_THAT(override_error("tls.mode=require"),
               Contains("tls.mode: require needs tls.cert_file and tls.key_file"));
    CHECK_THAT(override_error("tls.mode=verify-full"),
               Contains("must be one of disable, allow, require"));
    const Config c = load("", {"tls.mode=allow", "tls.cert_file=/c.pem", "tls.key_file=/k.pem"});
    CHECK(c.tls.mode == l5pg::config::TlsMode::Allow);
    CHECK(c.tls.ca_file.empty());
}

TEST_CASE("settings without effect are named, the defaults have none") {
    using l5pg::config::settings_without_effect;
    CHECK(settings_without_effect(load_from_string("", {})).empty());
    const auto lines = settings_without_effect(
        load_from_string("", {"listen.tcp_address=", "tls.mode=allow", "tls.cert_file=/x",
                              "tls.key_file=/y", "auth.tcp=trust", "rdma.soft_port=7000",
                              "auth.local=trust", "auth.ident_file=/z", "pool.mode=session"}));
    REQUIRE(lines.size() == 4);
    CHECK_THAT(lines[0], StartsWith("tls.mode: no effect, listen.tcp_address is empty"));
    CHECK_THAT(lines[1], StartsWith("auth.tcp: no effect"));
    CHECK_THAT(lines[2], StartsWith("rdma.soft_port: no effect"));
    CHECK_THAT(lines[3], StartsWith("auth.ident_file: no effect, auth.local is not peer"));
    // Pooling needs a method under which l5pgd knows who the client is.
    const auto pooled = settings_without_effect(
        load_from_string("", {"pool.mode=session", "auth.local=reject", "auth.tcp=passthrough",
                              "auth.upstream_authenticates=true"}));
    REQUIRE(pooled.size() == 1);
    CHECK_THAT(pooled[0], StartsWith("pool.mode: session has no effect"));
    // Trust over TCP identifies nobody without a TCP listener; RDMA with TCP clients refused.
    CHECK_THAT(
        settings_without_effect(load_from_string("", {"pool.mode=session", "auth.local=reject",
                                                      "auth.tcp=trust", "listen.tcp_address="}))
            .back(),
        StartsWith("pool.mode: session has no effect"));
    CHECK_THAT(settings_without_effect(load_from_string("", {"rdma.enabled=true"})).back(),
               StartsWith("rdma.enabled: no effect, auth.tcp is reject"));
    // A client-certificate requirement that plaintext clients bypass, or that nothing uses.
    CHECK_THAT(settings_without_effect(load_from_string("", {"tls.ca_file=/ca"})).back(),
               StartsWith("tls.ca_file: no effect, tls.mode is disable"));
    const std::vector<std::string> tls = {"tls.cert_file=/x", "tls.key_file=/y", "tls.ca_file=/ca"};
    auto with = [&](std::string mode) {
        std::vector<std::string> overrides = tls;
        overrides.push_back("tls.mode=" + mode);
        return settings_without_effect(load_from_string("", overrides));
    };
    REQUIRE(with("allow").size() == 1);
    CHECK_THAT(with("allow")[0], StartsWith("tls.ca_file: checks TLS clients only"));
    CHECK(with("require").empty());
}

TEST_CASE("one YAML document: a second one is an error, not ignored") {
    CHECK(load_from_string("---\nlisten:\n  port: 6500\n", {}).listen.port == 6500);
    CHECK(load_from_string("listen:\n  port: 6500\n...\n", {}).listen.port == 6500);
    CHECK_THAT(error_of("listen:\n  port: 6500\n---\ntls:\n  mode: require\n"),
               Contains("2 YAML documents") && Contains("merge them"));
    CHECK_THAT(error_of("---\nlisten: {}\n---\nauth: {}\n---\ntls: {}\n"),
               Contains("3 YAML documents"));
}

TEST_CASE("a Unix socket path longer than sun_path is refused when loading") {
    const std::string dir(100, 'd');
    CHECK_THAT(error_of("upstream:\n  unix_socket_dir: /" + dir + "\n"),
               StartsWith("upstream.unix_socket_dir: too long: the socket path \"/" + dir +
                          "/.s.PGSQL.5432\" has 115 bytes, a Unix socket's at most 107"));
    CHECK_THAT(error_of("listen:\n  unix_socket_dir: /" + dir + "\n"),
               StartsWith("listen.unix_socket_dir: too long"));
    // Not used when upstream.host is set (TCP).
    CHECK(error_of("upstream:\n  host: 127.0.0.1\n  unix_socket_dir: /" + dir + "\n").empty());
    // 94 bytes of directory + "/.s.PGSQL.5432" = 108: one too many; 93 fits.
    CHECK_THAT(error_of("upstream:\n  unix_socket_dir: /" + std::string(93, 'd') + "\n"),
               Contains("has 108 bytes"));
    CHECK(error_of("upstream:\n  unix_socket_dir: /" + std::string(92, 'd') + "\n").empty());
}
