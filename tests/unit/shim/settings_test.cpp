// The shim's environment variables (clientlib/settings.cpp): a value it cannot use keeps the
// default, or the strictest reading where a typo must not weaken a check.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "clientlib/settings.hpp"

using l5pg::shim::load_settings;
using l5pg::shim::settings;

namespace {

// Sets `name` for one load_settings(), then unsets it.
struct EnvVar {
    EnvVar(const char* name, const std::string& value) : name_(name) {
        ::setenv(name, value.c_str(), 1);
        load_settings();
    }
    ~EnvVar() { ::unsetenv(name_); }
    EnvVar(const EnvVar&) = delete;
    EnvVar& operator=(const EnvVar&) = delete;
    const char* name_;
};

}  // namespace

TEST_CASE("shim settings: L5PG_RDMA_GID_INDEX, its default -1 kept for a bad value", "[shim]") {
    for (const auto& [value, expected] :
         {std::pair<std::string, int>{"3", 3}, {"-1", -1}, {"abc", -1}, {"256", -1}, {"0", 0}}) {
        INFO(value);
        EnvVar gid("L5PG_RDMA_GID_INDEX", value);
        CHECK(settings().rdma_gid_index == expected);
    }
}

TEST_CASE("shim settings: L5PG_RDMA_PORTS keeps the first 16 ports", "[shim]") {
    std::string ports;
    for (int port = 7000; port < 7018; ++port)
        ports += (ports.empty() ? "" : ",") + std::to_string(port);
    EnvVar list("L5PG_RDMA_PORTS", ports);
    REQUIRE(settings().rdma_port_count == 16);
    CHECK(settings().rdma_ports[0] == 7000);
    CHECK(settings().rdma_ports[15] == 7015);
}

TEST_CASE("shim settings: an unknown L5PG_SSLMODE is read as verify-full", "[shim]") {
    EnvVar mode("L5PG_SSLMODE", "verify_full");  // a typo
    CHECK(settings().ssl_mode == l5pg::shim::SslMode::VerifyFull);
}
