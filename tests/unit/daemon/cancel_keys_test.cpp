#include <catch2/catch.hpp>

#include <chrono>
#include <optional>
#include <set>
#include <utility>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>

#include "daemon/cancel_keys.hpp"

using l5pg::daemon::CancelKeys;
using l5pg::protocol::CancelKey;

namespace {

// The backend `client` stands for; the cancel counts as delivered (and taken) at once.
std::optional<CancelKey> backend_of(CancelKeys& keys, CancelKey client) {
    auto translation = keys.backend_for(client);
    if (!translation)
        return std::nullopt;
    translation->in_flight.confirm();
    return translation->backend.key;
}

}  // namespace

TEST_CASE("CancelKeys: a client's key stands for its backend while the lease lasts") {
    CancelKeys keys;
    const CancelKey backend{4242, 0xdeadbeef};
    CancelKey client{};
    {
        CancelKeys::Lease lease = keys.issue({backend, {}});
        client = lease.key();
        CHECK(client != backend);
        CHECK(static_cast<int32_t>(client.backend_pid) > 0);
        CHECK(backend_of(keys, client) == backend);
        CHECK_FALSE(backend_of(keys, backend).has_value());  // the backend's own is not ours
        CHECK_FALSE(backend_of(keys, {client.backend_pid, client.secret ^ 1}).has_value());
        CancelKeys::Lease moved = std::move(lease);
        CHECK(backend_of(keys, client) == backend);
    }
    CHECK_FALSE(backend_of(keys, client).has_value());
    CHECK(keys.size() == 0);
}

TEST_CASE("CancelKeys: a cancel let through is remembered for its backend") {
    CancelKeys keys;
    const CancelKey backend{4242, 0xdeadbeef};
    CancelKeys::Lease lease = keys.issue({backend, {}});
    CHECK_FALSE(keys.cancelled_within(backend, std::chrono::seconds(5)));
    CHECK_FALSE(backend_of(keys, {lease.key().backend_pid, lease.key().secret + 1}).has_value());
    CHECK_FALSE(keys.cancelled_within(backend, std::chrono::seconds(5)));  // a wrong key
    CHECK(backend_of(keys, lease.key()) == backend);
    CHECK(keys.cancelled_within(backend, std::chrono::seconds(5)));
    CHECK_FALSE(keys.cancelled_within({4242, 1}, std::chrono::seconds(5)));
    CHECK_FALSE(keys.cancelled_within(backend, std::chrono::seconds(-1)));
}

TEST_CASE("CancelKeys: a cancel counts as on its way until its session lets it go") {
    CancelKeys keys;
    const CancelKey backend{4242, 0xdeadbeef};
    CancelKeys::Lease lease = keys.issue({backend, {}});
    const CancelKey client = lease.key();
    auto first = keys.backend_for(client);
    REQUIRE(first.has_value());
    auto second = keys.backend_for(client);
    REQUIRE(second.has_value());
    // In flight: whatever the window, even after the client's key was withdrawn.
    lease = CancelKeys::Lease();
    CHECK_FALSE(keys.backend_for(client).has_value());
    CHECK(keys.cancelled_within(backend, std::chrono::seconds(-1)));
    CancelKeys::InFlight moved = std::move(first->in_flight);
    first->in_flight = CancelKeys::InFlight();  // releasing a moved-from handle settles nothing
    CHECK(keys.cancelled_within(backend, std::chrono::seconds(-1)));
    moved.confirm();
    moved = CancelKeys::InFlight();
    CHECK(keys.cancelled_within(backend, std::chrono::seconds(-1)));  // the second is out
    second->in_flight.confirm();
    second.reset();
    CHECK_FALSE(keys.cancelled_within(backend, std::chrono::seconds(-1)));
    CHECK(keys.cancelled_within(backend, std::chrono::seconds(5)));  // settled just now
}

TEST_CASE("CancelKeys: a cancel whose outcome was not seen keeps counting after its session") {
    CancelKeys keys;
    const CancelKey backend{4242, 0xdeadbeef};
    const CancelKey other{4343, 0xfeedface};
    CancelKeys::Lease lease = keys.issue({backend, {}});
    CancelKeys::Lease other_lease = keys.issue({other, {}});
    keys.backend_for(lease.key()).reset();  // its session gave up waiting for Postgres
    keys.backend_for(other_lease.key())->in_flight.confirm();
    CHECK(keys.cancelled_within(backend, std::chrono::seconds(-1)));
    CHECK_FALSE(keys.cancelled_within(other, std::chrono::seconds(-1)));
    // A confirmed cancel later does not clear the doubt about the first.
    keys.backend_for(lease.key())->in_flight.confirm();
    CHECK(keys.cancelled_within(backend, std::chrono::seconds(-1)));
}

TEST_CASE("CancelKeys: every key out is different, and assigning a lease withdraws the old") {
    CancelKeys keys;
    std::set<std::pair<uint32_t, uint32_t>> seen;
    std::vector<CancelKeys::Lease> leases;
    for (int i = 0; i < 1000; ++i) {
        leases.push_back(keys.issue({{1, 2}, {}}));
        seen.emplace(leases.back().key().backend_pid, leases.back().key().secret);
    }
    CHECK(seen.size() == 1000);
    const CancelKey first = leases.front().key();
    leases.front() = keys.issue({{3, 4}, {}});
    CHECK_FALSE(backend_of(keys, first).has_value());
    CHECK(keys.size() == 1000);
    leases.front() = CancelKeys::Lease();
    CHECK(keys.size() == 999);
}

TEST_CASE("CancelKeys: a plain session's client holds the backend's own key") {
    CancelKeys keys;
    const CancelKey backend{4242, 0xdeadbeef};
    {
        const CancelKeys::Lease lease = keys.serve({backend, {}});
        CHECK(lease.key() == backend);
        CHECK(backend_of(keys, backend) == backend);
        CHECK_FALSE(backend_of(keys, {4242, 0xdeadbeee}).has_value());
        CHECK(keys.serve({backend, {}}).key() == CancelKey{});  // the same key twice: not served
        CHECK(backend_of(keys, backend) == backend);            // ...and the first still is
    }
    CHECK_FALSE(backend_of(keys, backend).has_value());
    CHECK(keys.size() == 0);
}

TEST_CASE("CancelKeys: a key leads to its backend's server, as it was reached") {
    CancelKeys keys;
    l5pg::daemon::UpstreamAddress where;
    auto* in = reinterpret_cast<sockaddr_in*>(&where.storage);
    in->sin_family = AF_INET;
    in->sin_port = htons(5432);
    REQUIRE(inet_pton(AF_INET, "10.0.0.7", &in->sin_addr) == 1);
    where.length = sizeof(sockaddr_in);
    for (const bool pooled : {true, false}) {
        const CancelKeys::Lease lease =
            pooled ? keys.issue({{4242, 7}, where}) : keys.serve({{4242, 7}, where});
        const auto translation = keys.backend_for(lease.key());
        REQUIRE(translation.has_value());
        CHECK(translation->backend.address.length == where.length);
        CHECK(std::memcmp(&translation->backend.address.storage, &where.storage, where.length) ==
              0);
    }
}
