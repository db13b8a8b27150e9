// The shim's SHM end against a real segment, as l5pgd maps it (Segment::attach): which
// writes ring l5pgd's worker (transport/wait/rung_waits.hpp). Each connection's socket is a
// socketpair; the test plays the worker, arming its client->server rings as it would
// before blocking (Worker::arm_sessions) and counting the doorbell bytes that arrive.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <optional>
#include <string_view>

#include "clientlib/real_calls.hpp"
#include "clientlib/shm_end.hpp"
#include "transport/shm/ring.hpp"
#include "transport/shm/segment.hpp"
#include "transport/wait/wait_id.hpp"

namespace shm = l5pg::shm;
using l5pg::shim::ShmEnd;
using l5pg::transport::IoStatus;

namespace {

constexpr size_t kRing = l5pg::transport::kMinRingSize;

// One upgraded connection: the shim's end and socket, l5pgd's mapping and socket.
struct Connection {
    Connection() {
        l5pg::shim::resolve_real_calls();
        shm::SysError error;
        std::optional<shm::Segment> client = shm::Segment::create(kRing, kRing, error);
        REQUIRE(client);
        server = shm::Segment::attach(::dup(client->fd()), kRing, kRing, error);
        REQUIRE(server);
        end.emplace(std::move(*client));
        int sv[2];
        REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        app = sv[0];
        worker = sv[1];
        reader.emplace(server->header().c2s, server->c2s_data(), server->c2s_size());
    }
    ~Connection() {
        end.reset();
        ::close(app);
        if (worker >= 0)
            ::close(worker);
    }
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;

    void send(std::string_view bytes) {
        const auto r = end->write(app, std::as_bytes(std::span(bytes.data(), bytes.size())));
        REQUIRE(r.status == IoStatus::Ok);
    }
    size_t send_then_doorbells(std::string_view bytes) {
        send(bytes);
        return doorbells();
    }
    // Doorbell bytes waiting on l5pgd's side of the socket (drained).
    size_t doorbells() {
        char buf[64];
        size_t n = 0;
        for (;;) {
            const ssize_t got = ::recv(worker, buf, sizeof buf, MSG_DONTWAIT);
            if (got <= 0)
                return n;
            n += static_cast<size_t>(got);
        }
    }

    std::optional<shm::Segment> server;  // l5pgd's mapping
    std::optional<ShmEnd> end;           // the shim's
    std::optional<shm::RingReader> reader;
    int app = -1;
    int worker = -1;
};

}  // namespace

// The worker about to block: arms both sessions' client->server rings under one name.
void worker_blocks(Connection& a, Connection& b, uint64_t name) {
    a.reader->arm(name);
    b.reader->arm(name);
}

TEST_CASE("ShmEnd: one doorbell per named block of a worker", "[shim][shm][doorbell]") {
    Connection a;
    Connection b;
    SECTION("sessions armed under one name: the first write rings, the second does not") {
        worker_blocks(a, b, l5pg::wait::next_wait_id());
        CHECK(a.send_then_doorbells("query a") == 1);
        CHECK(b.send_then_doorbells("query b") == 0);
        // The worker's next block has a new name: it is rung again.
        worker_blocks(a, b, l5pg::wait::next_wait_id());
        CHECK(b.send_then_doorbells("query b") == 1);
        CHECK(a.send_then_doorbells("query a") == 0);
    }
    SECTION("unnamed arms always ring") {
        worker_blocks(a, b, l5pg::wait::kUnnamedWait);
        CHECK(a.send_then_doorbells("query a") == 1);
        CHECK(b.send_then_doorbells("query b") == 1);
    }
    SECTION("a doorbell that could not be sent does not count as rung") {
        worker_blocks(a, b, l5pg::wait::next_wait_id());
        ::close(a.worker);  // a's session is gone: its doorbell fails (EPIPE)
        a.worker = -1;
        a.send("query a");
        CHECK(b.send_then_doorbells("query b") == 1);
    }
    SECTION("a write that finds the flag unarmed rings nobody") {
        a.send("query a");
        CHECK(a.doorbells() == 0);
    }
}
