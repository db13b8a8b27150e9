// The shim's SHM end against a real segment, as l5pgd maps it (Segment::attach): which
// writes ring l5pgd's worker (transport/wait/rung_waits.hpp). Each connection's socket is a
// socketpair; the test plays the worker, arming its client->server rings as it would
// before blocking (Worker::arm_sessions) and counting the doorbell bytes that arrive.
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <optional>
#include <string_view>

#include "clientlib/channel.hpp"
#include "clientlib/doorbell_relook.hpp"
#include "clientlib/end_waiters.hpp"
#include "clientlib/fd_table.hpp"
#include "clientlib/l5pg.h"
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

// recv(MSG_PEEK) into several iovecs peeks again past what it has shown: an impossible record
// there must not break the channel before the shown bytes were read.
TEST_CASE("ShmEnd: a peek past shown bytes leaves them readable before a torn record",
          "[shim][shm]") {
    Connection c;
    shm::RingWriter to_client(c.server->header().s2c, c.server->s2c_data(), c.server->s2c_size());
    shm::RingStatus status = shm::RingStatus::Ok;
    const std::string_view good = "good";
    REQUIRE(to_client.write(std::as_bytes(std::span(good.data(), good.size())), status) == 4);
    // The next record's length word, beyond the first record's footprint, made impossible.
    std::atomic_ref<uint32_t>(
        *reinterpret_cast<uint32_t*>(c.server->s2c_data() + shm::record_footprint(4)))
        .store(0xffffffffu);
    std::byte out[16];
    CHECK(c.end->peek(out, 0).bytes == 4);
    CHECK(c.end->peek(out, 4).status == IoStatus::WouldBlock);
    CHECK_FALSE(c.end->broken());
    const auto r = c.end->read(c.app, out);
    CHECK(r.bytes == 4);
    CHECK(std::string_view(reinterpret_cast<const char*>(out), 4) == good);
    CHECK(c.end->read(c.app, out).status == IoStatus::Error);  // now the torn record counts
}

// Two threads wait on one connection (one in poll() for a NOTIFY, one for its query's
// answer): the end has one reader_waiting flag, and the first thread's taking it back must
// not cancel the second's arming (that thread slept through l5pgd's NOTIFY).
TEST_CASE("ShmEnd: a thread's wait keeps its wake-up when another thread's wait ends",
          "[shim][shm]") {
    using l5pg::shim::CountedWants;
    using l5pg::transport::Want;
    Connection c;
    l5pg::shim::Channel* ch = l5pg::shim::channel_acquire_end(*c.end, L5PG_TRANSPORT_SHM, false);
    REQUIRE(ch != nullptr);
    // The fd names the channel, as after an upgrade (a return touches the socket only then).
    l5pg::shim::fd_table_take_ownership();
    l5pg::shim::fd_set_candidate(c.app);
    REQUIRE(l5pg::shim::fd_claim_for_upgrade(c.app));
    REQUIRE(l5pg::shim::fd_attach_channel(c.app, *ch));
    shm::RingWriter to_client(c.server->header().s2c, c.server->s2c_data(), c.server->s2c_size());
    const auto publish = [&to_client](std::string_view what = "notify") {
        shm::RingStatus status = shm::RingStatus::Ok;
        REQUIRE(to_client.write(std::as_bytes(std::span(what.data(), what.size())), status) ==
                what.size());
    };
    const auto read = [&c](size_t n) {
        std::byte out[64];
        const auto r = c.end->read(c.app, std::span(out, n));
        REQUIRE(r.status == IoStatus::Ok);
        return r.bytes;
    };
    const uint64_t query_wait = l5pg::wait::next_wait_id();
    const uint64_t notify_wait = l5pg::wait::next_wait_id();
    CountedWants query = 0, notify = 0;
    // The NOTIFY thread waits first, the query's thread beside it; the query's leaves first.
    const auto both_wait = [&] {
        (void)l5pg::shim::arm_as_waiter(*ch, Want::Read, notify_wait, notify);
        (void)l5pg::shim::arm_as_waiter(*ch, Want::Read, query_wait, query);
    };
    const auto both_leave = [&] {
        l5pg::shim::stop_waiting(*ch, query);
        l5pg::shim::stop_waiting(*ch, notify);
    };
    SECTION("the other waiter still gets its doorbell, unnamed") {
        both_wait();
        // The query's answer came: its thread takes the flag back (it has not left its wait
        // yet; a poll() takes its flags back after every sleep).
        l5pg::shim::disarm_unless_others_wait(*ch, Want::Read, query);
        publish();
        uint64_t rung_for = notify_wait;
        CHECK(to_client.reader_needs_wakeup(rung_for));
        // Armed by two waits, the flag carries no name: l5pgd must not skip it because it
        // rang another session of one of the two polls already.
        CHECK(rung_for == l5pg::wait::kUnnamedWait);
        both_leave();
    }
    SECTION("the last waiter takes the flag back") {
        (void)l5pg::shim::arm_as_waiter(*ch, Want::Read, query_wait, query);
        (void)l5pg::shim::arm_as_waiter(*ch, Want::Read, notify_wait, notify);
        l5pg::shim::disarm_unless_others_wait(*ch, Want::Read, query);
        l5pg::shim::stop_waiting(*ch, query);
        l5pg::shim::disarm_unless_others_wait(*ch, Want::Read, notify);
        l5pg::shim::stop_waiting(*ch, notify);
        publish();
        CHECK_FALSE(to_client.reader_needs_wakeup());
    }
    SECTION("a thread that leaves arms again for the one that sleeps on") {
        // l5pgd rang for the query's answer and took the flag; the query's thread drained the
        // doorbell byte (the other thread's poll() found nothing and sleeps on), read the
        // answer and leaves its wait.
        both_wait();
        publish("answer");
        REQUIRE(to_client.reader_needs_wakeup());
        CHECK(read(6) == 6);
        l5pg::shim::stop_waiting(*ch, query);
        publish();  // the NOTIFY
        CHECK(to_client.reader_needs_wakeup());
        l5pg::shim::stop_waiting(*ch, notify);
    }
    SECTION("a thread that leaves data behind has l5pgd ring for the one that sleeps on") {
        both_wait();
        publish("answer");
        REQUIRE(to_client.reader_needs_wakeup());
        publish();  // the NOTIFY came too, with the flag taken: no doorbell of its own
        l5pg::shim::stop_waiting(*ch, query);
        CHECK(c.doorbells() == 0);  // what waits may be the leaver's own: it reads first
        char answer[6];
        iovec iov{answer, sizeof answer};
        CHECK(l5pg::shim::channel_recv(*ch, c.app, &iov, 1, 0) == 6);
        CHECK(c.doorbells() == 1);  // the poke for what it left: l5pgd answers with a doorbell
        l5pg::shim::stop_waiting(*ch, notify);
    }
    SECTION("a doorbell byte is left on the socket only while another waiter is ready") {
        (void)l5pg::shim::arm_as_waiter(*ch, Want::Read, query_wait, query);
        publish("answer");
        CHECK_FALSE(l5pg::shim::doorbell_owed_to_others(*ch, query));  // alone: its own
        (void)l5pg::shim::arm_as_waiter(*ch, Want::Read, notify_wait, notify);
        CHECK(l5pg::shim::doorbell_owed_to_others(*ch, query));  // may be the other's
        CHECK(read(6) == 6);
        CHECK_FALSE(l5pg::shim::doorbell_owed_to_others(*ch, query));  // nothing left to read
        both_leave();
    }
    SECTION("a hang-up is drained even while the bytes are owed to another waiter") {
        both_wait();
        publish("answer");
        REQUIRE(l5pg::shim::doorbell_owed_to_others(*ch, query));
        CHECK_FALSE(l5pg::shim::channel_drain_for_waiter(*ch, c.app, POLLIN, query));
        ::close(c.worker);  // l5pgd is gone
        c.worker = -1;
        CHECK(l5pg::shim::channel_drain_for_waiter(*ch, c.app, POLLIN | POLLHUP, query));
        CHECK(c.end->hung_up());  // the EOF was taken in: every waiter finds the end ready
        both_leave();
    }
    SECTION("a drain that may have taken another waiter's doorbell asks l5pgd for one") {
        both_wait();
        // The query's thread was woken by a byte for nothing the other wanted, and drains
        // after the answer came and was rung for (the flag taken).
        CHECK(l5pg::shim::channel_drain_for_waiter(*ch, c.app, POLLIN, query));
        CHECK(c.doorbells() == 0);  // nothing to read: no one to ring for
        publish("answer");
        REQUIRE(to_client.reader_needs_wakeup());
        l5pg::shim::ring_again_for_others(*ch, c.app, query);
        CHECK(c.doorbells() == 1);  // the poke, which l5pgd answers with a doorbell
        both_leave();
    }
    SECTION("a drain touches no fd that another thread closed meanwhile") {
        both_wait();
        publish("answer");
        REQUIRE(to_client.reader_needs_wakeup());
        (void)l5pg::shim::fd_forget(c.app);  // closed: the number may name another file now
        CHECK(l5pg::shim::channel_drain_for_waiter(*ch, c.app, POLLHUP, query));
        CHECK(c.doorbells() == 0);  // no poke written through the number
        both_leave();
    }
    SECTION("only a wait for room may sleep through its doorbell") {
        (void)l5pg::shim::arm_as_waiter(*ch, Want::Read, query_wait, query);
        CHECK_FALSE(l5pg::shim::may_miss_doorbell(query));
        (void)l5pg::shim::arm_as_waiter(*ch, Want::Write, query_wait, query);
        CHECK(l5pg::shim::may_miss_doorbell(query));
        l5pg::shim::stop_waiting(*ch, query);
    }
    SECTION("a return touches no fd that another thread closed meanwhile") {
        both_wait();
        publish("answer");
        REQUIRE(to_client.reader_needs_wakeup());
        publish();
        l5pg::shim::stop_waiting(*ch, query);
        (void)l5pg::shim::fd_forget(c.app);  // closed: the number may name another file now
        char answer[6];
        iovec iov{answer, sizeof answer};
        CHECK(l5pg::shim::channel_recv(*ch, c.app, &iov, 1, 0) == 6);
        CHECK(c.doorbells() == 0);  // no poke written through the number
        l5pg::shim::stop_waiting(*ch, notify);
    }
    SECTION("a lone waiter arms under its wait's name") {
        (void)l5pg::shim::arm_as_waiter(*ch, Want::Read, query_wait, query);
        publish();
        uint64_t rung_for = l5pg::wait::kUnnamedWait;
        CHECK(to_client.reader_needs_wakeup(rung_for));
        CHECK(rung_for == query_wait);
        l5pg::shim::stop_waiting(*ch, query);
    }
    (void)l5pg::shim::fd_forget(c.app);
    l5pg::shim::channel_release(*ch);
}

// An edge-triggered epoll user reads once per edge and never makes the read that finds the
// ring empty: each return must drain the doorbell l5pgd rang for the wait it armed, or one
// byte per answer stays on the socket until l5pgd's doorbells fail with EAGAIN and no new
// edge ever comes.
TEST_CASE("ShmEnd: a return drains the doorbell rung for the foreign wait it armed",
          "[shim][shm][doorbell]") {
    Connection c;
    shm::RingWriter to_client(c.server->header().s2c, c.server->s2c_data(), c.server->s2c_size());
    const auto answer = [&] {  // l5pgd publishes an answer and rings if the client waits
        const std::string_view what = "answer";
        shm::RingStatus status = shm::RingStatus::Ok;
        REQUIRE(to_client.write(std::as_bytes(std::span(what.data(), what.size())), status) ==
                what.size());
        if (to_client.reader_needs_wakeup())
            REQUIRE(::send(c.worker, "x", 1, 0) == 1);
    };
    const auto queued_on_app_socket = [&c] {
        int n = -1;
        REQUIRE(::ioctl(c.app, FIONREAD, &n) == 0);
        return n;
    };
    std::byte out[64];
    c.end->prepare_for_foreign_wait(c.app, false);  // the ring is empty: armed
    for (int i = 0; i < 1000; ++i) {
        answer();
        REQUIRE(c.end->read(c.app, out).bytes == 6);    // one read: no EAGAIN after it
        c.end->prepare_for_foreign_wait(c.app, false);  // as the call returns
        REQUIRE(queued_on_app_socket() == 0);
    }
    SECTION("room made, unless another thread waits for room") {
        using l5pg::transport::Want;
        while (c.end->write(c.app, std::as_bytes(std::span("request", 7))).status == IoStatus::Ok) {
        }
        (void)c.end->arm(Want::Write, l5pg::wait::kUnnamedWait);  // the ring is full
        std::span<const std::byte> record;
        REQUIRE(c.reader->peek(record) == shm::RingStatus::Ok);  // l5pgd takes a record
        c.reader->consume(record.size());
        REQUIRE(c.reader->writer_needs_wakeup());
        REQUIRE(::send(c.worker, "x", 1, 0) == 1);
        answer();  // and l5pgd rang for an answer too: the bytes cannot be told apart
        REQUIRE(c.end->read(c.app, out).bytes == 6);
        c.end->prepare_for_foreign_wait(c.app, true);  // that thread's to see
        CHECK(queued_on_app_socket() == 2);
        c.end->prepare_for_foreign_wait(c.app, false);
        CHECK(queued_on_app_socket() == 0);
    }
    SECTION("a poke's answer too") {
        answer();  // data left in the ring when the call returns: a poke, answered
        c.end->prepare_for_foreign_wait(c.app, false);
        CHECK(c.doorbells() == 1);
        REQUIRE(::send(c.worker, "x", 1, 0) == 1);
        REQUIRE(c.end->read(c.app, out).bytes == 6);
        c.end->prepare_for_foreign_wait(c.app, false);
        CHECK(queued_on_app_socket() == 0);
    }
}

// A wait that may sleep through its doorbell looks at the ring soon, then less and less often.
TEST_CASE("DoorbellRelook: 1, 2, 4 ... 64 ms, and a poll() timeout cut to the next look",
          "[shim]") {
    using namespace std::chrono_literals;
    l5pg::shim::DoorbellRelook relook;
    for (const auto ms : {1ms, 2ms, 4ms, 8ms, 16ms, 32ms, 64ms, 64ms})
        CHECK(relook.next() == ms);
    l5pg::shim::DoorbellRelook cut;
    CHECK(cut.cut(-1) == 1);  // no timeout: the next look
    CHECK(cut.cut(100) == 2);
    CHECK(cut.cut(3) == 3);  // the timeout comes first
    CHECK(cut.cut(0) == 0);
}
