#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/reload_keys.hpp"

using l5pg::config::Config;
using l5pg::config::diff;
using l5pg::config::keep_restart_keys;
using l5pg::config::load_from_string;
using l5pg::config::Reload;
using l5pg::config::reload_keys;
using l5pg::config::settings_of;

namespace {

bool listed(const std::string& key) {
    const auto keys = reload_keys();
    return std::any_of(keys.begin(), keys.end(), [&](const auto& k) { return k.first == key; });
}

size_t count(Reload how) {
    const auto keys = reload_keys();
    return static_cast<size_t>(
        std::count_if(keys.begin(), keys.end(), [&](const auto& k) { return k.second == how; }));
}

// One override per Reload::Restart key, each a valid value other than the default.
const std::vector<std::string> kRestartOverrides = {
    "listen.unix_socket_dir=/tmp/elsewhere",
    "listen.port=7001",
    "listen.tcp_address=::1",
    "listen.backlog=17",
    "listen.unix_socket_mode=0700",
    "workers.count=5",
    "workers.cpu_affinity=[0,1]",
    "rdma.enabled=true",
    "rdma.device=soft",
    "rdma.device_name=rxe0",
    "rdma.device_port=2",
    "rdma.gid_index=1",
    "rdma.max_ring_size=65536",
    "rdma.max_memory=262144",
    "rdma.completion_timeout_ms=5",
    "rdma.soft_port=7002",
    "metrics.listen=127.0.0.1:9999",
    "metrics.labels=database",
    "metrics.label_limit=5",
};

}  // namespace

TEST_CASE("reload: every key of the example configuration has a reload rule") {
    const YAML::Node root = YAML::LoadFile(L5PG_SOURCE_DIR "/config/l5pgd.example.yaml");
    size_t keys = 0;
    for (const auto& section : root) {
        for (const auto& key : section.second) {
            const std::string dotted =
                section.first.as<std::string>() + "." + key.first.as<std::string>();
            INFO(dotted);
            CHECK(listed(dotted));
            ++keys;
        }
    }
    CHECK(keys == reload_keys().size());
}

TEST_CASE("reload: diff names changed keys with their old and new values") {
    const Config running = load_from_string("", {});
    const Config loaded =
        load_from_string("shm:\n  spin_us: 7\n", {"logging.level=debug", "listen.port=7000"});
    const auto changes = diff(running, loaded);
    REQUIRE(changes.size() == 3);
    CHECK(changes[0].key == "listen.port");
    CHECK(changes[0].before == "6432");
    CHECK(changes[0].after == "7000");
    CHECK(changes[0].reload == Reload::Restart);
    CHECK(changes[1].key == "shm.spin_us");
    CHECK(changes[1].after == "7");
    CHECK(changes[1].reload == Reload::Live);
    CHECK(changes[2].key == "logging.level");
    CHECK(changes[2].before == "info");
    CHECK(changes[2].reload == Reload::Live);
    CHECK(diff(running, running).empty());
}

TEST_CASE("reload: keep_restart_keys keeps exactly the restart keys") {
    const Config running = load_from_string("", {});
    const Config loaded = load_from_string("", kRestartOverrides);
    const auto changes = diff(running, loaded);
    CHECK(changes.size() == kRestartOverrides.size());
    CHECK(count(Reload::Restart) == kRestartOverrides.size());
    for (const auto& change : changes) {
        INFO(change.key);
        CHECK(change.reload == Reload::Restart);
    }
    CHECK(diff(running, keep_restart_keys(running, loaded)).empty());

    const Config live = load_from_string("", {"listen.port=7003", "shm.yield_us=3"});
    const auto applied = diff(running, keep_restart_keys(running, live));
    REQUIRE(applied.size() == 1);
    CHECK(applied[0].key == "shm.yield_us");
}

TEST_CASE("reload: settings_of gives every key's value beside its default") {
    // A file without keys is the defaults: each value is its own default.
    for (const auto& s : settings_of(load_from_string("", {}))) {
        INFO(s.key);
        CHECK(s.value == s.default_value);
    }
    const auto settings = settings_of(load_from_string("", {"listen.port=7000", "shm.yield_us=3"}));
    REQUIRE(settings.size() == reload_keys().size());
    size_t changed = 0;
    for (const auto& s : settings) {
        if (s.value == s.default_value)
            continue;
        ++changed;
        INFO(s.key);
        CHECK((s.key == "listen.port" || s.key == "shm.yield_us"));
        CHECK(s.reload == (s.key == "listen.port" ? Reload::Restart : Reload::Live));
    }
    CHECK(changed == 2);
}
