// l5pgd's client check (daemon/client_auth.hpp), its ident map and the startup caps.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>
#include <string_view>

#include "daemon/client_auth.hpp"
#include "daemon/ident_map.hpp"
#include "daemon/peer.hpp"
#include "daemon/segment_registry.hpp"
#include "daemon/startup_limiter.hpp"

using Catch::Matchers::Contains;
using l5pg::config::AuthConfig;
using l5pg::config::AuthMethod;
using l5pg::daemon::AuthFailure;
using l5pg::daemon::AuthRequest;
using l5pg::daemon::check_client;
using l5pg::daemon::IdentMap;
using l5pg::daemon::StartupLimiter;

namespace {

AuthRequest local_request(std::string os_user, std::string_view role) {
    return AuthRequest{true, 1000, std::move(os_user), role};
}

AuthRequest tcp_request(std::string_view role) {
    return AuthRequest{false, 0, {}, role};
}

}  // namespace

TEST_CASE("peer: a local client may use the role named like its OS user") {
    const AuthConfig cfg;
    CHECK(check_client(cfg, {}, local_request("alice", "alice")).allowed());
}

TEST_CASE("peer: any other role is refused, naming the rule") {
    const auto verdict = check_client(AuthConfig{}, {}, local_request("alice", "postgres"));
    CHECK(verdict.failure == AuthFailure::PeerMismatch);
    CHECK_THAT(verdict.message, Contains("\"postgres\"") && Contains("OS user \"alice\"") &&
                                    Contains("auth.local=peer"));
}

TEST_CASE("peer: the ident map grants exactly the pairs it lists") {
    const IdentMap ident = IdentMap::parse("alice reader\n# comment\n  bob  writer # tail\n", "t");
    CHECK(ident.size() == 2);
    CHECK(check_client(AuthConfig{}, ident, local_request("alice", "reader")).allowed());
    CHECK(check_client(AuthConfig{}, ident, local_request("bob", "writer")).allowed());
    CHECK_FALSE(check_client(AuthConfig{}, ident, local_request("alice", "writer")).allowed());
    CHECK_FALSE(check_client(AuthConfig{}, ident, local_request("bob", "reader")).allowed());
    CHECK_FALSE(check_client(AuthConfig{}, ident, local_request("reader", "alice")).allowed());
}

TEST_CASE("peer: the ident map may name a numeric uid (clients in other containers)") {
    const IdentMap ident = IdentMap::parse("1000 app\n", "t");
    CHECK(check_client(AuthConfig{}, ident, local_request("", "app")).allowed());
    CHECK(check_client(AuthConfig{}, ident, local_request("alice", "app")).allowed());
    CHECK_FALSE(check_client(AuthConfig{}, ident, local_request("", "postgres")).allowed());
}

TEST_CASE("ident map: a role beyond 63 bytes is warned of and skipped, not an error") {
    const IdentMap ok = IdentMap::parse("alice " + std::string(63, 'r') + "\n", "t");
    CHECK(ok.size() == 1);
    CHECK(ok.warnings().empty());
    const IdentMap map = IdentMap::parse("\nalice " + std::string(64, 'r') + "\nbob app\n", "t");
    CHECK(map.size() == 1);
    REQUIRE(map.warnings().size() == 1);
    CHECK(map.warnings()[0] ==
          "t: line 2: role name longer than 63 bytes: the rule can never be used");
}

TEST_CASE("ident map: a uid with leading zeros is that uid") {
    const IdentMap ident = IdentMap::parse("01000 app\n", "t");
    CHECK(check_client(AuthConfig{}, ident, local_request("", "app")).allowed());  // uid 1000
}

TEST_CASE("peer: a numeric OS-USER is a uid, never a user name of those digits") {
    const IdentMap ident = IdentMap::parse("2000 app\n", "t");
    // uid 1000 whose user name is "2000" (useradd refuses such names; other tools do not).
    CHECK_FALSE(check_client(AuthConfig{}, ident, local_request("2000", "app")).allowed());
    // Its own name as a role stays Postgres's peer rule.
    CHECK(check_client(AuthConfig{}, ident, local_request("2000", "2000")).allowed());
}

TEST_CASE("peer: a uid without a name is refused") {
    const auto verdict = check_client(AuthConfig{}, {}, local_request("", "postgres"));
    CHECK(verdict.failure == AuthFailure::UnknownOsUser);
    CHECK_THAT(verdict.message, Contains("uid 1000"));
}

TEST_CASE("peer: a role name Postgres would cut to 63 bytes is refused, even its own OS user's") {
    const std::string long_name(64, 'a');
    const std::string cut = long_name.substr(0, 63);
    const IdentMap ident = IdentMap::parse("alice " + cut + "\n", "t");
    const auto own = check_client(AuthConfig{}, {}, local_request(long_name, long_name));
    CHECK(own.failure == AuthFailure::PeerMismatch);
    CHECK_THAT(own.message, Contains("longer than 63 bytes"));
    // Not the rule's role either, as Postgres would cut it to.
    CHECK_FALSE(check_client(AuthConfig{}, ident, local_request("alice", long_name)).allowed());
    CHECK(check_client(AuthConfig{}, {}, local_request(cut, cut)).allowed());
}

TEST_CASE("peer: a refusal shows the role as valid UTF-8, at most 63 bytes of it") {
    const std::string hostile = "r\xff\xfe" + std::string(10000, 'x');
    const auto verdict = check_client(AuthConfig{}, {}, local_request("alice", hostile));
    CHECK(verdict.failure == AuthFailure::PeerMismatch);
    CHECK_THAT(verdict.message,
               Contains("role name \"r\xEF\xBF\xBD\xEF\xBF\xBD" + std::string(60, 'x') + "...\""));
    CHECK(verdict.message.size() < 200);
    const auto other = check_client(AuthConfig{}, {},
                                    local_request("alice",
                                                  "b\xff"
                                                  "b"));
    CHECK_THAT(other.message, Contains("for user \"b\xEF\xBF\xBD"
                                       "b\""));
}

TEST_CASE("peer: a client whose credentials could not be read matches no rule") {
    const IdentMap ident = IdentMap::parse("4294967295 reader\n", "t");
    AuthRequest request = local_request("", "reader");
    request.uid = static_cast<uid_t>(-1);
    const auto verdict = check_client(AuthConfig{}, ident, request);
    CHECK(verdict.failure == AuthFailure::UnknownOsUser);
    CHECK_THAT(verdict.message, Contains("could not be read"));
}

TEST_CASE("a StartupMessage without a role is refused") {
    CHECK(check_client(AuthConfig{}, {}, local_request("alice", "")).failure ==
          AuthFailure::NoRole);
}

TEST_CASE("TCP clients are refused by default, and served under trust or passthrough") {
    AuthConfig cfg;
    const auto verdict = check_client(cfg, {}, tcp_request("postgres"));
    CHECK(verdict.failure == AuthFailure::Rejected);
    CHECK_THAT(verdict.message, Contains("auth.tcp=reject"));
    cfg.tcp = AuthMethod::Passthrough;
    CHECK(check_client(cfg, {}, tcp_request("postgres")).allowed());
    cfg.tcp = AuthMethod::Trust;
    CHECK(check_client(cfg, {}, tcp_request("postgres")).allowed());
}

TEST_CASE("auth.local=reject refuses local clients, trust admits any role") {
    AuthConfig cfg;
    cfg.local = AuthMethod::Reject;
    CHECK(check_client(cfg, {}, local_request("alice", "alice")).failure == AuthFailure::Rejected);
    cfg.local = AuthMethod::Trust;
    CHECK(check_client(cfg, {}, local_request("alice", "postgres")).allowed());
}

TEST_CASE("ident map: malformed lines name the file and line") {
    CHECK_THROWS_WITH(IdentMap::parse("alice reader\nbob\n", "map"),
                      Contains("map: line 2") && Contains("got 1 fields"));
    CHECK_THROWS_WITH(IdentMap::parse("a b c\n", "map"), Contains("got 3 fields"));
    CHECK_THROWS_WITH(IdentMap::load("/nonexistent/ident.map"),
                      Contains("cannot read \"/nonexistent/ident.map\": No such file"));
    CHECK_THROWS_WITH(IdentMap::load("/tmp"), Contains("it is a directory"));
    CHECK(IdentMap::load("").size() == 0);
}

TEST_CASE("startup caps: per peer and in all; slots are returned when released") {
    StartupLimiter limiter(3, 2);
    StartupLimiter::Refusal why = StartupLimiter::Refusal::None;
    auto a1 = limiter.try_acquire("uid 1", why);
    auto a2 = limiter.try_acquire("uid 1", why);
    CHECK(why == StartupLimiter::Refusal::None);
    auto a3 = limiter.try_acquire("uid 1", why);
    CHECK_FALSE(a3.held());
    CHECK(why == StartupLimiter::Refusal::PerPeer);
    auto b1 = limiter.try_acquire("uid 2", why);
    CHECK(b1.held());
    auto b2 = limiter.try_acquire("uid 2", why);
    CHECK(why == StartupLimiter::Refusal::Total);
    CHECK(limiter.in_startup() == 3);
    a1.release();
    a1.release();  // idempotent
    CHECK(limiter.in_startup() == 2);
    CHECK(limiter.try_acquire("uid 1", why).held());  // taken and returned at once
    {
        StartupLimiter::Slot moved = std::move(a2);
        CHECK_FALSE(a2.held());
    }
    CHECK(limiter.in_startup() == 1);
}

TEST_CASE("segment registry: one session per memfd, free again once released") {
    using l5pg::daemon::SegmentRegistry;
    SegmentRegistry registry;
    const int memfd = ::memfd_create("registry-test", MFD_CLOEXEC);
    REQUIRE(memfd >= 0);
    const int same = ::dup(memfd);  // another descriptor, the same segment
    const int other = ::memfd_create("registry-test-2", MFD_CLOEXEC);
    SegmentRegistry::Refusal why;
    auto first = registry.claim(memfd, 7, why);
    REQUIRE(first.has_value());
    CHECK_FALSE(registry.claim(same, 8, why).has_value());
    CHECK(why.holder == 7);
    CHECK(registry.claim(other, 9, why).has_value());  // taken and released at once
    CHECK(registry.size() == 1);
    {
        SegmentRegistry::Claim moved = std::move(*first);
        first->release();  // moved from: nothing to release
        CHECK(registry.size() == 1);
    }
    CHECK(registry.size() == 0);
    CHECK(registry.claim(same, 8, why).has_value());
    CHECK_FALSE(registry.claim(-1, 10, why).has_value());
    CHECK(why.holder == 0);
    CHECK(why.err == EBADF);
    // Not a memfd: refused by its seals, before fstat() could reach its file system.
    int pipe_fds[2];
    REQUIRE(::pipe(pipe_fds) == 0);
    CHECK_FALSE(registry.claim(pipe_fds[0], 11, why).has_value());
    CHECK(why.err == EINVAL);
    CHECK(std::string_view(why.call) == "F_GET_SEALS");
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    ::close(memfd);
    ::close(same);
    ::close(other);
}

TEST_CASE("peer identity of a Unix socket comes from the kernel") {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    const auto peer = l5pg::daemon::identify_peer(fds[0], true);
    CHECK(peer.uid == ::getuid());
    CHECK(peer.pid == ::getpid());
    CHECK(peer.limit_key() == "uid " + std::to_string(::getuid()));
    CHECK_THAT(peer.describe(), Contains("pid " + std::to_string(::getpid())));
    CHECK(l5pg::daemon::os_user_name(0) == "root");
    ::close(fds[0]);
    ::close(fds[1]);
}
