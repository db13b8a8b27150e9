#include <catch2/catch.hpp>

#include <chrono>
#include <set>
#include <utility>

#include "daemon/cancel_keys.hpp"

using l5pg::daemon::CancelKeys;
using l5pg::protocol::CancelKey;

TEST_CASE("CancelKeys: a client's key stands for its backend while the lease lasts") {
    CancelKeys keys;
    const CancelKey backend{4242, 0xdeadbeef};
    CancelKey client{};
    {
        CancelKeys::Lease lease = keys.issue(backend);
        client = lease.key();
        CHECK(client != backend);
        CHECK(static_cast<int32_t>(client.backend_pid) > 0);
        CHECK(keys.backend_for(client) == backend);
        CHECK_FALSE(keys.backend_for(backend).has_value());  // the backend's own is not ours
        CHECK_FALSE(keys.backend_for({client.backend_pid, client.secret ^ 1}).has_value());
        CancelKeys::Lease moved = std::move(lease);
        CHECK(keys.backend_for(client) == backend);
    }
    CHECK_FALSE(keys.backend_for(client).has_value());
    CHECK(keys.size() == 0);
}

TEST_CASE("CancelKeys: a cancel let through is remembered for its backend") {
    CancelKeys keys;
    const CancelKey backend{4242, 0xdeadbeef};
    CancelKeys::Lease lease = keys.issue(backend);
    CHECK_FALSE(keys.cancelled_within(backend, std::chrono::seconds(5)));
    CHECK_FALSE(keys.backend_for({lease.key().backend_pid, lease.key().secret + 1}).has_value());
    CHECK_FALSE(keys.cancelled_within(backend, std::chrono::seconds(5)));  // a wrong key
    CHECK(keys.backend_for(lease.key()) == backend);
    CHECK(keys.cancelled_within(backend, std::chrono::seconds(5)));
    CHECK_FALSE(keys.cancelled_within({4242, 1}, std::chrono::seconds(5)));
    CHECK_FALSE(keys.cancelled_within(backend, std::chrono::seconds(-1)));
}

TEST_CASE("CancelKeys: every key out is different, and assigning a lease withdraws the old") {
    CancelKeys keys;
    std::set<std::pair<uint32_t, uint32_t>> seen;
    std::vector<CancelKeys::Lease> leases;
    for (int i = 0; i < 1000; ++i) {
        leases.push_back(keys.issue({1, 2}));
        seen.emplace(leases.back().key().backend_pid, leases.back().key().secret);
    }
    CHECK(seen.size() == 1000);
    const CancelKey first = leases.front().key();
    leases.front() = keys.issue({3, 4});
    CHECK_FALSE(keys.backend_for(first).has_value());
    CHECK(keys.size() == 1000);
    leases.front() = CancelKeys::Lease();
    CHECK(keys.size() == 999);
}
