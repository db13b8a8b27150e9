// The soft device on its own: RC semantics of WRITE/READ, completions, selective
// signaling, ordering, access checks, failures and timeouts.
#include <arpa/inet.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "test_util.hpp"
#include "transport/rdma/atomic_bytes.hpp"
#include "transport/rdma/soft/frame.hpp"
#include "transport/rdma/soft/soft_qp.hpp"

using namespace l5pg::rdma;
using namespace l5pg::rdma::test;

namespace {

constexpr Access kRemote = Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead;

// A queue pair whose peer is a bare socket (`wire.b`): the test reads what the QP sends
// and writes what it receives. Not connected yet.
struct BareQp {
    std::unique_ptr<Device> device;
    std::unique_ptr<ProtectionDomain> pd;
    FdPair wire;
    std::unique_ptr<QueuePair> qp;
};

BareQp bare_qp(const DeviceOptions& options = {}) {
    BareQp b;
    b.device = open_soft(options);
    std::string error;
    b.pd = b.device->alloc_pd(error);
    b.wire = socket_pair();
    QpOptions qo;
    qo.soft_wire_fd = ::dup(b.wire.a.get());
    b.qp = b.pd->create_qp(qo, error);
    REQUIRE(b.qp != nullptr);
    return b;
}

// Connects `qp` to a soft endpoint that numbers its requests from `peer_psn`.
void connect_to_soft_peer(QueuePair& qp, uint32_t peer_psn = 0) {
    QpEndpoint peer;
    peer.kind = DeviceKind::Soft;
    peer.psn = peer_psn;
    std::string error;
    REQUIRE(qp.connect(peer, error));
}

}  // namespace

TEST_CASE("soft: a WRITE lands in the target's memory and completes at the initiator",
          "[rdma][soft]") {
    QpPair p;
    Region src = make_region(*p.pd_a, 8192, Access::LocalWrite);
    Region dst = make_region(*p.pd_b, 8192, kRemote);
    const auto data = pattern(1, 5000);
    std::memcpy(src.data(), data.data(), data.size());
    std::string error;
    REQUIRE(
        p.a->post(write_wr(src, 0, 5000, addr(dst.data()) + 100, dst.mr->rkey(), 42, true), error));
    const Completion c = next_completion(*p.a);
    CHECK(c.status == WcStatus::Success);
    CHECK(c.wr_id == 42);
    CHECK(c.opcode == Opcode::Write);
    CHECK(c.byte_len == 5000);
    const auto landed = snapshot(dst.data(), 8192);
    CHECK(std::memcmp(landed.data() + 100, data.data(), data.size()) == 0);
    CHECK(landed[99] == std::byte{0});
    CHECK(landed[5100] == std::byte{0});
    Completion none;
    CHECK(p.b->poll(std::span(&none, 1)) == 0);  // the target sees no completion
}

TEST_CASE("soft: a READ returns the target's memory", "[rdma][soft]") {
    QpPair p;
    Region local = make_region(*p.pd_a, 4096, Access::LocalWrite);
    Region remote = make_region(*p.pd_b, 4096, kRemote);
    const auto data = pattern(2, 3000);
    std::memcpy(remote.data() + 7, data.data(), data.size());
    // The fill happens before the device thread's reads through the wire (post, frame,
    // socket), which ThreadSanitizer cannot see; a poll of b's QP takes the mutex its
    // device thread takes before reading, which it can.
    Completion unused;
    (void)p.b->poll(std::span(&unused, 1));
    std::string error;
    REQUIRE(
        p.a->post(read_wr(local, 1, 3000, addr(remote.data()) + 7, remote.mr->rkey(), 7), error));
    const Completion c = next_completion(*p.a);
    CHECK(c.status == WcStatus::Success);
    CHECK(c.opcode == Opcode::Read);
    CHECK(c.wr_id == 7);
    CHECK(std::memcmp(local.data() + 1, data.data(), data.size()) == 0);
}

TEST_CASE("soft: inline WRITEs copy the source when posted", "[rdma][soft]") {
    QpPair p;
    Region src = make_region(*p.pd_a, 4096, Access::LocalWrite);
    Region dst = make_region(*p.pd_b, 4096, kRemote);
    std::memset(src.data(), 0x11, 64);
    WorkRequest wr = write_wr(src, 0, 64, addr(dst.data()), dst.mr->rkey(), 1, true);
    wr.inline_data = true;
    std::string error;
    REQUIRE(p.a->post(wr, error));
    std::memset(src.data(), 0x22, 64);  // allowed right after post() for inline data
    REQUIRE(next_completion(*p.a).status == WcStatus::Success);
    const auto landed = snapshot(dst.data(), 64);
    CHECK(landed[0] == std::byte{0x11});
    CHECK(landed[63] == std::byte{0x11});
}

TEST_CASE("soft: selective signaling, only signaled requests produce completions", "[rdma][soft]") {
    QpPair p;
    Region src = make_region(*p.pd_a, 4096, Access::LocalWrite);
    Region dst = make_region(*p.pd_b, 4096, kRemote);
    std::string error;
    for (int i = 0; i < 5; ++i) {
        src.data()[i] = static_cast<std::byte>(i + 1);
        REQUIRE(
            p.a->post(write_wr(src, i, 1, addr(dst.data()) + i, dst.mr->rkey(), i, false), error));
    }
    src.data()[5] = std::byte{6};
    REQUIRE(p.a->post(write_wr(src, 5, 1, addr(dst.data()) + 5, dst.mr->rkey(), 5, true), error));
    const Completion c = next_completion(*p.a);
    CHECK(c.wr_id == 5);
    const auto landed = snapshot(dst.data(), 6);
    for (int i = 0; i < 6; ++i)  // the signaled completion retired every earlier request
        CHECK(landed[i] == static_cast<std::byte>(i + 1));
    // Nothing else was completed: the next completion is that of the next signaled request.
    REQUIRE(p.a->post(write_wr(src, 5, 1, addr(dst.data()) + 5, dst.mr->rkey(), 6, true), error));
    CHECK(next_completion(*p.a).wr_id == 6);
}

TEST_CASE("soft: WRITEs of one QP are applied in order", "[rdma][soft]") {
    QpPair p;
    constexpr int kWrites = 512;
    Region src = make_region(*p.pd_a, kWrites, Access::LocalWrite);
    Region dst = make_region(*p.pd_b, kWrites, kRemote);
    std::memset(src.data(), 1, kWrites);
    // An observer on the target side: whenever slot j is set, every earlier slot must be.
    std::atomic<bool> done{false};
    std::atomic<int> violations{0};
    std::thread observer([&] {
        while (!done.load()) {
            for (int j = kWrites - 1; j >= 0; --j) {
                if (load_u8(dst.data() + j, std::memory_order_acquire) == 0)
                    continue;
                for (int i = 0; i < j; ++i) {
                    if (load_u8(dst.data() + i, std::memory_order_relaxed) == 0)
                        violations.fetch_add(1);
                }
                break;
            }
        }
    });
    std::string error;
    for (int i = 0; i < kWrites; ++i) {
        const bool signaled = i % 32 == 31;
        REQUIRE(p.a->post(write_wr(src, i, 1, addr(dst.data()) + i, dst.mr->rkey(), i, signaled),
                          error));
        if (signaled)
            REQUIRE(next_completion(*p.a).status == WcStatus::Success);
    }
    done.store(true);
    observer.join();
    CHECK(violations.load() == 0);
    const auto landed = snapshot(dst.data(), kWrites);
    for (int i = 0; i < kWrites; ++i)
        REQUIRE(landed[i] == std::byte{1});
}

TEST_CASE("soft: a bad rkey is an error completion, fails both QPs, flushes the rest",
          "[rdma][soft]") {
    QpPair p;
    Region src = make_region(*p.pd_a, 4096, Access::LocalWrite);
    Region dst = make_region(*p.pd_b, 4096, kRemote);
    std::string error;
    // Both requests leave together: unheld, the peer's error answer to the first can fail
    // the QP before the second is posted (seen under TSan on a loaded machine).
    p.a->hold_posts(true);
    // Unsignaled, yet its failure still produces a completion.
    REQUIRE(p.a->post(write_wr(src, 0, 16, addr(dst.data()), dst.mr->rkey() ^ 0x5555, 1, false),
                      error));
    REQUIRE(p.a->post(write_wr(src, 0, 16, addr(dst.data()), dst.mr->rkey(), 2, true), error));
    p.a->hold_posts(false);
    const Completion first = next_completion(*p.a);
    CHECK(first.wr_id == 1);
    CHECK(first.status == WcStatus::RemoteAccessError);
    const Completion second = next_completion(*p.a);
    CHECK(second.wr_id == 2);
    CHECK(second.status == WcStatus::Flushed);
    std::string reason;
    CHECK(p.a->failed(&reason));
    CHECK_THAT(reason, Catch::Contains("remote access error"));
    CHECK(eventually([&] { return p.b->failed(nullptr); }));
    CHECK_FALSE(p.a->post(write_wr(src, 0, 16, addr(dst.data()), dst.mr->rkey(), 3, true), error));
    CHECK(snapshot(dst.data(), 1)[0] == std::byte{0});  // nothing was written
}

TEST_CASE("soft: out-of-range WRITEs never touch memory outside the region", "[rdma][soft]") {
    const uint64_t kGuard = 4096;
    auto bad_write = [&](uint64_t offset_from_region, uint32_t length) {
        QpPair p;
        Region src = make_region(*p.pd_a, 8192, Access::LocalWrite);
        std::memset(src.data(), 0x5a, 8192);
        std::string error;
        auto buffer = Buffer::allocate(3 * kGuard, error);
        REQUIRE(buffer.has_value());
        std::memset(buffer->data(), 0xee, 3 * kGuard);
        std::byte* region = buffer->data() + kGuard;  // the middle page only
        auto mr = p.pd_b->register_memory(region, kGuard, kRemote, error);
        REQUIRE(mr != nullptr);
        REQUIRE(p.a->post(
            write_wr(src, 0, length, addr(region) + offset_from_region, mr->rkey(), 9, true),
            error));
        CHECK(next_completion(*p.a).status == WcStatus::RemoteAccessError);
        for (uint64_t i = 0; i < 3 * kGuard; ++i)
            REQUIRE(buffer->data()[i] == std::byte{0xee});
    };
    SECTION("runs past the end") {
        bad_write(kGuard - 32, 64);
    }
    SECTION("starts before the start") {
        bad_write(static_cast<uint64_t>(-32), 64);
    }
    SECTION("longer than the region") {
        bad_write(0, 2 * 4096);
    }
    SECTION("address arithmetic wraps") {
        bad_write(UINT64_MAX - 8, 64);
    }
}

TEST_CASE("soft: access rights and range are checked for READs too", "[rdma][soft]") {
    SECTION("READ past the end") {
        QpPair p;
        Region local = make_region(*p.pd_a, 4096, Access::LocalWrite);
        Region remote = make_region(*p.pd_b, 4096, kRemote);
        std::string error;
        REQUIRE(p.a->post(read_wr(local, 0, 128, addr(remote.data()) + 4000, remote.mr->rkey(), 1),
                          error));
        CHECK(next_completion(*p.a).status == WcStatus::RemoteAccessError);
    }
    SECTION("READ of a region without RemoteRead") {
        QpPair p;
        Region local = make_region(*p.pd_a, 4096, Access::LocalWrite);
        Region remote = make_region(*p.pd_b, 4096, Access::LocalWrite | Access::RemoteWrite);
        std::string error;
        REQUIRE(p.a->post(read_wr(local, 0, 8, addr(remote.data()), remote.mr->rkey(), 1), error));
        CHECK(next_completion(*p.a).status == WcStatus::RemoteAccessError);
    }
    SECTION("WRITE into a region without RemoteWrite") {
        QpPair p;
        Region local = make_region(*p.pd_a, 4096, Access::LocalWrite);
        Region remote = make_region(*p.pd_b, 4096, Access::RemoteRead);
        std::string error;
        REQUIRE(p.a->post(write_wr(local, 0, 8, addr(remote.data()), remote.mr->rkey(), 1, true),
                          error));
        CHECK(next_completion(*p.a).status == WcStatus::RemoteAccessError);
    }
    SECTION("an rkey of another protection domain") {
        QpPair p;
        Region local = make_region(*p.pd_a, 4096, Access::LocalWrite);
        std::string error;
        auto other_pd = p.device->alloc_pd(error);
        Region elsewhere = make_region(*other_pd, 4096, kRemote);
        REQUIRE(p.a->post(
            write_wr(local, 0, 8, addr(elsewhere.data()), elsewhere.mr->rkey(), 1, true), error));
        CHECK(next_completion(*p.a).status == WcStatus::RemoteAccessError);
        CHECK(elsewhere.data()[0] == std::byte{0});
    }
    SECTION("a deregistered region") {
        QpPair p;
        Region local = make_region(*p.pd_a, 4096, Access::LocalWrite);
        Region remote = make_region(*p.pd_b, 4096, kRemote);
        const uint32_t rkey = remote.mr->rkey();
        remote.mr.reset();
        std::string error;
        REQUIRE(p.a->post(write_wr(local, 0, 8, addr(remote.data()), rkey, 1, true), error));
        CHECK(next_completion(*p.a).status == WcStatus::RemoteAccessError);
        CHECK(remote.data()[0] == std::byte{0});
    }
}

TEST_CASE("soft: post() rejects malformed requests", "[rdma][soft]") {
    QpPair p(DeviceOptions{}, 16);
    Region src = make_region(*p.pd_a, 4096, Access::LocalWrite);
    Region dst = make_region(*p.pd_b, 4096, kRemote);
    std::string error;
    WorkRequest wr = write_wr(src, 0, 0, addr(dst.data()), dst.mr->rkey(), 1, true);
    CHECK_FALSE(p.a->post(wr, error));  // zero length
    wr.length = 4097;
    CHECK_FALSE(p.a->post(wr, error));  // beyond the local region
    CHECK_THAT(error, Catch::Contains("local buffer"));
    wr.length = 16;
    wr.lkey ^= 1;
    CHECK_FALSE(p.a->post(wr, error));  // unknown lkey
    wr.lkey = src.mr->lkey();
    wr.length = 1024;
    wr.inline_data = true;
    CHECK_FALSE(p.a->post(wr, error));  // longer than max_inline
    wr.inline_data = false;
    // The send queue holds 16 requests; unsignaled ones only leave it with a later
    // signaled completion, so the 17th is refused.
    wr.signaled = false;
    wr.length = 8;
    for (int i = 0; i < 16; ++i)
        REQUIRE(p.a->post(wr, error));
    CHECK_FALSE(p.a->post(wr, error));
    CHECK_THAT(error, Catch::Contains("send queue full"));
}

TEST_CASE("soft: a peer that goes away fails the QP; nothing waits forever", "[rdma][soft]") {
    SECTION("peer QP destroyed") {
        QpPair p;
        Region src = make_region(*p.pd_a, 4096, Access::LocalWrite);
        Region dst = make_region(*p.pd_b, 4096, kRemote);
        p.b.reset();
        std::string error;
        // Either post() already knows, or the request completes with an error.
        if (p.a->post(write_wr(src, 0, 8, addr(dst.data()), dst.mr->rkey(), 1, true), error))
            CHECK(next_completion(*p.a).status != WcStatus::Success);
        CHECK(eventually([&] { return p.a->failed(nullptr); }));
    }
    SECTION("peer alive but silent: the ack timeout fires") {
        DeviceOptions options;
        options.soft_ack_timeout = 200ms;
        auto [device, pd, wire, qp] = bare_qp(options);  // wire.b never answers
        connect_to_soft_peer(*qp);
        std::string error;
        Region src = make_region(*pd, 4096, Access::LocalWrite);
        REQUIRE(qp->post(write_wr(src, 0, 8, 0x1000, 1, 1, true), error));
        const Completion c = next_completion(*qp, 5000ms);
        CHECK(c.status == WcStatus::RetryExceeded);
        std::string reason;
        CHECK(qp->failed(&reason));
        CHECK_THAT(reason, Catch::Contains("ack timeout"));
    }
}

TEST_CASE("soft: garbage on the wire fails the QP", "[rdma][soft]") {
    auto run = [](std::span<const std::byte> garbage, const char* expect) {
        auto [device, pd, wire, qp] = bare_qp();
        connect_to_soft_peer(*qp, 5);
        REQUIRE(::write(wire.b.get(), garbage.data(), garbage.size()) ==
                static_cast<ssize_t>(garbage.size()));
        std::string reason;
        CHECK(eventually([&] { return qp->failed(&reason); }));
        CHECK_THAT(reason, Catch::Contains(expect));
    };
    using namespace l5pg::rdma::soft;
    std::array<std::byte, kFrameHeaderSize> frame{};
    SECTION("unknown frame type") {
        frame[0] = std::byte{99};
        run(frame, "unknown frame type");
    }
    SECTION("a frame longer than the maximum message") {
        FrameHeader h;
        h.type = FrameType::WriteRequest;
        h.length = 0x7fffffff;
        h.seq = 5;
        encode_frame_header(h, frame.data());
        run(frame, "longer than the maximum");
    }
    SECTION("a request out of sequence (someone else's connection)") {
        FrameHeader h;
        h.type = FrameType::ReadRequest;
        h.length = 8;
        h.seq = 77;
        encode_frame_header(h, frame.data());
        run(frame, "out of sequence");
    }
    SECTION("an ack for nothing") {
        FrameHeader h;
        h.type = FrameType::Ack;
        h.seq = 1;
        encode_frame_header(h, frame.data());
        run(frame, "ack for an unknown request");
    }
}

TEST_CASE("soft: connect rejects a verbs endpoint", "[rdma][soft]") {
    auto [device, pd, wire, qp] = bare_qp();
    std::string error;
    QpEndpoint peer;
    peer.kind = DeviceKind::Verbs;
    CHECK_FALSE(qp->connect(peer, error));
    CHECK_THAT(error, Catch::Contains("verbs"));
    QpOptions none;
    CHECK(pd->create_qp(none, error) == nullptr);
    CHECK_THAT(error, Catch::Contains("soft_wire_fd"));
}

TEST_CASE("soft: scrambled delivery still delivers every byte", "[rdma][soft]") {
    DeviceOptions options;
    options.soft_scramble_writes = true;
    QpPair p(options);
    Region src = make_region(*p.pd_a, 1 << 16, Access::LocalWrite);
    Region dst = make_region(*p.pd_b, 1 << 16, kRemote);
    const auto data = pattern(3, 40000);
    std::memcpy(src.data(), data.data(), data.size());
    std::string error;
    REQUIRE(p.a->post(write_wr(src, 0, 40000, addr(dst.data()), dst.mr->rkey(), 1, true), error));
    REQUIRE(next_completion(*p.a).status == WcStatus::Success);
    CHECK(snapshot(dst.data(), data.size()) == data);
}

TEST_CASE("soft: two QPs flooding each other with large WRITEs do not deadlock", "[rdma][soft]") {
    QpPair p;
    constexpr uint32_t kChunk = 1 << 20;
    Region a_src = make_region(*p.pd_a, kChunk, Access::LocalWrite);
    Region a_dst = make_region(*p.pd_a, kChunk, kRemote);
    Region b_src = make_region(*p.pd_b, kChunk, Access::LocalWrite);
    Region b_dst = make_region(*p.pd_b, kChunk, kRemote);
    auto flood = [](QueuePair& qp, const Region& src, const Region& dst) -> std::string {
        std::string error;
        for (int i = 0; i < 24; ++i) {
            if (!qp.post(write_wr(src, 0, kChunk, addr(dst.data()), dst.mr->rkey(), i, i % 8 == 7),
                         error))
                return error;
            if (i % 8 == 7) {
                Completion c;
                while (qp.poll(std::span(&c, 1)) == 0) {
                    if (!qp.wait(10s))
                        return "timed out";
                }
                if (c.status != WcStatus::Success)
                    return to_string(c.status);
            }
        }
        return "";
    };
    std::string ra;
    std::string rb;
    std::thread t([&] { rb = flood(*p.b, b_src, a_dst); });
    ra = flood(*p.a, a_src, b_dst);
    t.join();
    CHECK(ra.empty());
    CHECK(rb.empty());
}

TEST_CASE("soft: works over a TCP connection", "[rdma][soft]") {
    UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    REQUIRE(listener.valid());
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listener.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    REQUIRE(::listen(listener.get(), 1) == 0);
    socklen_t len = sizeof sa;
    REQUIRE(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&sa), &len) == 0);
    const int out = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(::connect(out, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    const int in = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
    REQUIRE(in >= 0);

    auto device = open_soft();
    std::string error;
    auto pd_a = device->alloc_pd(error);
    auto pd_b = device->alloc_pd(error);
    QpOptions qa;
    qa.soft_wire_fd = out;
    QpOptions qb;
    qb.soft_wire_fd = in;
    auto a = pd_a->create_qp(qa, error);
    auto b = pd_b->create_qp(qb, error);
    REQUIRE((a && b));
    REQUIRE(a->connect(b->local_endpoint(), error));
    REQUIRE(b->connect(a->local_endpoint(), error));
    Region local = make_region(*pd_a, 1 << 20, Access::LocalWrite);
    Region remote = make_region(*pd_b, 1 << 20, kRemote);
    const auto data = pattern(11, 1 << 20);
    std::memcpy(local.data(), data.data(), data.size());
    REQUIRE(a->post(write_wr(local, 0, 1 << 20, addr(remote.data()), remote.mr->rkey(), 1, true),
                    error));
    REQUIRE(next_completion(*a).status == WcStatus::Success);
    std::memset(local.data(), 0, 1 << 20);
    REQUIRE(a->post(read_wr(local, 0, 1 << 20, addr(remote.data()), remote.mr->rkey(), 2), error));
    REQUIRE(next_completion(*a).status == WcStatus::Success);
    CHECK(std::memcmp(local.data(), data.data(), data.size()) == 0);
}

TEST_CASE("soft: held posts start together at hold_posts(false), or when the poster waits",
          "[rdma][soft]") {
    auto [device, pd, wire, qp] = bare_qp();  // what the QP sends, we read from wire.b
    connect_to_soft_peer(*qp);
    std::string error;
    Region src = make_region(*pd, 4096, Access::LocalWrite);
    auto sent = [&] {
        std::array<std::byte, 4096> buf;
        const ssize_t n = ::recv(wire.b.get(), buf.data(), buf.size(), MSG_DONTWAIT);
        return n < 0 ? size_t{0} : static_cast<size_t>(n);
    };
    using l5pg::rdma::soft::kFrameHeaderSize;
    const size_t three_writes = 3 * (kFrameHeaderSize + 100);
    qp->hold_posts(true);
    for (uint64_t i = 0; i < 3; ++i)
        REQUIRE(qp->post(write_wr(src, i * 100, 100, 0x1000, 1, i, i == 2), error));
    CHECK(sent() == 0);
    SECTION("hold_posts(false) sends them") {
        qp->hold_posts(false);
        CHECK(sent() == three_writes);  // sent before the call returned, in one send
    }
    SECTION("wait() sends them: nobody waits for a request never started") {
        CHECK_FALSE(qp->wait(1ms));     // our bare peer never answers
        CHECK(sent() == three_writes);  // sent before the call returned, in one send
    }
}

namespace {

// Two connected queue pairs on `device`, each in its own protection domain.
struct PairOnDevice {
    std::unique_ptr<ProtectionDomain> pd_a, pd_b;
    std::unique_ptr<QueuePair> a, b;
    std::optional<Region> src, dst;
};

PairOnDevice pair_on(Device& device, uint32_t region_size) {
    PairOnDevice pr;
    std::string error;
    pr.pd_a = device.alloc_pd(error);
    pr.pd_b = device.alloc_pd(error);
    REQUIRE((pr.pd_a && pr.pd_b));
    FdPair wire = socket_pair();
    QpOptions qa;
    qa.soft_wire_fd = ::dup(wire.a.get());
    QpOptions qb;
    qb.soft_wire_fd = ::dup(wire.b.get());
    pr.a = pr.pd_a->create_qp(qa, error);
    pr.b = pr.pd_b->create_qp(qb, error);
    REQUIRE((pr.a && pr.b));
    REQUIRE(pr.a->connect(pr.b->local_endpoint(), error));
    REQUIRE(pr.b->connect(pr.a->local_endpoint(), error));
    pr.src.emplace(make_region(*pr.pd_a, region_size, Access::LocalWrite));
    pr.dst.emplace(make_region(*pr.pd_b, region_size, kRemote));
    return pr;
}

// Waits for the next completion of `qp` (worker threads: no Catch2 here).
std::string await_one(QueuePair& qp) {
    Completion c;
    while (qp.poll(std::span(&c, 1)) == 0) {
        if (!qp.wait(kWait))
            return "timed out";
    }
    return c.status == WcStatus::Success ? "" : to_string(c.status);
}

}  // namespace

TEST_CASE("soft: one device thread serves many queue pairs at once", "[rdma][soft]") {
    // Every pair on one device: 16 initiators WRITE concurrently, each into its own
    // target, and every WRITE lands and completes.
    auto device = open_soft();
    constexpr int kPairs = 16;
    constexpr uint32_t kSize = 64 * 1024;
    std::vector<PairOnDevice> pairs;
    for (int i = 0; i < kPairs; ++i) {
        pairs.push_back(pair_on(*device, kSize));
        const auto data = pattern(static_cast<uint64_t>(i), kSize);
        std::memcpy(pairs.back().src->data(), data.data(), kSize);
    }
    std::vector<std::string> results(kPairs);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < pairs.size(); ++i) {
        threads.emplace_back([&, i] {
            PairOnDevice& pr = pairs[i];
            for (uint32_t off = 0; off < kSize; off += 4096) {
                if (!pr.a->post(write_wr(*pr.src, off, 4096, addr(pr.dst->data()) + off,
                                         pr.dst->mr->rkey(), off, off + 4096 == kSize),
                                results[i]))
                    return;
            }
            results[i] = await_one(*pr.a);
        });
    }
    for (std::thread& t : threads)
        t.join();
    for (size_t i = 0; i < pairs.size(); ++i) {
        INFO("pair " << i);
        CHECK(results[i].empty());
        const auto landed = snapshot(pairs[i].dst->data(), kSize);
        CHECK(landed == pattern(i, kSize));
    }
}

TEST_CASE("soft: destroying a queue pair while its peer floods it leaves the others working",
          "[rdma][soft]") {
    // The device thread may be applying the flood when the target goes away: it must not
    // touch the destroyed queue pair, and another pair of the same device carries on.
    auto device = open_soft();
    constexpr uint32_t kChunk = 256 * 1024;
    PairOnDevice flooded = pair_on(*device, kChunk);
    PairOnDevice other = pair_on(*device, 4096);
    std::thread flood([&] {
        std::string error;
        for (uint64_t i = 0; i < 4096; ++i) {
            if (!flooded.a->post(write_wr(*flooded.src, 0, kChunk, addr(flooded.dst->data()),
                                          flooded.dst->mr->rkey(), i, i % 8 == 7),
                                 error))
                return;  // the target is gone: the QP failed
            if (i % 8 == 7 && !await_one(*flooded.a).empty())
                return;
        }
    });
    std::this_thread::sleep_for(20ms);
    flooded.b.reset();
    flood.join();
    CHECK(flooded.a->failed());
    std::string error;
    REQUIRE(other.a->post(
        write_wr(*other.src, 0, 4096, addr(other.dst->data()), other.dst->mr->rkey(), 1, true),
        error));
    CHECK(next_completion(*other.a).status == WcStatus::Success);
}

TEST_CASE("soft: a driven device runs in its owner's loop, and in wait()", "[rdma][soft]") {
    DeviceOptions options;
    options.soft_driven = true;
    QpPair p(options);
    REQUIRE(p.device->progress_fd() >= 0);
    Region src = make_region(*p.pd_a, 4096, Access::LocalWrite);
    Region dst = make_region(*p.pd_b, 4096, kRemote);
    std::memset(src.data(), 0x3c, 4096);
    std::string error;
    SECTION("the owner: progress() when progress_fd() is readable") {
        REQUIRE(
            p.a->post(write_wr(src, 0, 4096, addr(dst.data()), dst.mr->rkey(), 1, true), error));
        // Nobody else applies the WRITE: the target's wire event is ours to handle.
        pollfd pfd{p.device->progress_fd(), POLLIN, 0};
        REQUIRE(::poll(&pfd, 1, static_cast<int>(kWait.count() * 1000)) == 1);
        p.device->progress();
        CHECK(snapshot(dst.data(), 4096)[4095] == std::byte{0x3c});
        // The acknowledgement comes back the same way.
        Completion c;
        CHECK(eventually([&] {
            p.device->progress();
            return p.a->poll(std::span(&c, 1)) == 1;
        }));
        CHECK(c.status == WcStatus::Success);
    }
    SECTION("wait() runs the device until the completion is there") {
        REQUIRE(
            p.a->post(write_wr(src, 0, 4096, addr(dst.data()), dst.mr->rkey(), 2, true), error));
        CHECK(p.a->wait(kWait));
        CHECK(next_completion(*p.a).wr_id == 2);
        CHECK(snapshot(dst.data(), 4096)[0] == std::byte{0x3c});
    }
}

TEST_CASE("soft: wait() after held posts larger than the socket's buffer sends all of them",
          "[rdma][soft]") {
    // One socketful goes at once; the rest must follow on the EPOLLOUT edges while we
    // wait, held or not (an 8 MiB WRITE against a ~200 KiB socket buffer).
    DeviceOptions options;
    SECTION("device thread") {}
    SECTION("driven by the waiter") {
        options.soft_driven = true;
    }
    QpPair p(options);
    constexpr uint32_t kSize = 8u << 20;
    Region src = make_region(*p.pd_a, kSize, Access::LocalWrite);
    Region dst = make_region(*p.pd_b, kSize, kRemote);
    std::memset(src.data(), 0x77, kSize);
    std::string error;
    p.a->hold_posts(true);
    REQUIRE(p.a->post(write_wr(src, 0, kSize, addr(dst.data()), dst.mr->rkey(), 9, true), error));
    CHECK(p.a->wait(kWait));  // one wait, not a loop of short ones that each send a little
    Completion c;
    REQUIRE(p.a->poll(std::span(&c, 1)) == 1);
    CHECK(c.status == WcStatus::Success);
    CHECK(snapshot(dst.data(), kSize)[kSize - 1] == std::byte{0x77});
    p.a->hold_posts(false);
}

TEST_CASE("soft: input beyond one turn's read budget is read on later turns without new events",
          "[rdma][soft]") {
    // 1 MiB of WRITE frames is queued on the wire before the QP starts, more than one
    // turn of the device reads (256 KiB); the bare peer then stays silent, so no further
    // edge ever comes. The ack for the last frame proves every frame was executed.
    DeviceOptions options;
    const bool driven = GENERATE(false, true);
    options.soft_driven = driven;
    auto [device, pd, wire, qp] = bare_qp(options);
    const int big = 8 << 20;
    if (::setsockopt(wire.b.get(), SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big) != 0) {
        WARN("SO_SNDBUFFORCE needs CAP_NET_ADMIN; not tested here");
        return;
    }
    Region dst = make_region(*pd, 32 * 1024, kRemote);
    using namespace l5pg::rdma::soft;
    constexpr int kFrames = 32;
    std::vector<std::byte> stream;
    for (int i = 0; i < kFrames; ++i) {
        FrameHeader h;
        h.type = FrameType::WriteRequest;
        h.flags = i + 1 == kFrames ? kFlagAckRequested : 0;
        h.length = 32 * 1024;
        h.seq = 100 + static_cast<uint64_t>(i);
        h.remote_addr = addr(dst.data());
        h.rkey = dst.mr->rkey();
        const size_t at = stream.size();
        stream.resize(at + kFrameHeaderSize + h.length, std::byte{static_cast<uint8_t>(i)});
        encode_frame_header(h, stream.data() + at);
    }
    REQUIRE(::send(wire.b.get(), stream.data(), stream.size(), MSG_DONTWAIT) ==
            static_cast<ssize_t>(stream.size()));
    connect_to_soft_peer(*qp, 100);
    std::array<std::byte, kFrameHeaderSize> ack{};
    auto ack_arrived = [&] {
        return ::recv(wire.b.get(), ack.data(), ack.size(), MSG_DONTWAIT) ==
               static_cast<ssize_t>(ack.size());
    };
    if (!driven) {
        CHECK(eventually(ack_arrived));
    } else {
        // The owner's loop: progress() whenever the fd is readable. Input left over after
        // a turn must keep the fd readable, or the loop would sleep on it.
        bool arrived = false;
        for (int turn = 0; turn < 64 && !arrived; ++turn) {
            pollfd pfd{device->progress_fd(), POLLIN, 0};
            REQUIRE(::poll(&pfd, 1, static_cast<int>(kWait.count() * 1000)) == 1);
            (void)device->progress();
            arrived = ack_arrived();
        }
        CHECK(arrived);
    }
    FrameHeader h;
    std::string error;
    REQUIRE(decode_frame_header(ack.data(), h, error));
    CHECK(h.type == FrameType::Ack);
    CHECK(h.seq == 100 + kFrames - 1);
    CHECK(snapshot(dst.data(), 32 * 1024)[0] == std::byte{kFrames - 1});
    CHECK_FALSE(qp->failed());
}

// A frame's header says how long it is; the room the QP sets aside for it grows with the
// bytes that come. A 32-byte header claiming a 64 MiB WRITE made the QP commit 64 MiB at
// once (the payload need never come), a lever for any client of l5pgd's soft device.
TEST_CASE("soft: a frame's header alone does not make the QP set its length aside",
          "[rdma][soft]") {
    const auto resident = [] {
        long pages = 0;
        long resident_pages = 0;
        std::FILE* f = std::fopen("/proc/self/statm", "r");
        REQUIRE(f != nullptr);
        REQUIRE(std::fscanf(f, "%ld %ld", &pages, &resident_pages) == 2);
        std::fclose(f);
        return resident_pages * ::sysconf(_SC_PAGESIZE);
    };
    auto [device, pd, wire, qp] = bare_qp();
    constexpr size_t kLength = 16u << 20;
    Region dst = make_region(*pd, kLength, kRemote);  // a target that takes it
    connect_to_soft_peer(*qp, 5);
    using namespace l5pg::rdma::soft;
    std::vector<std::byte> frame(kFrameHeaderSize + 4096);
    FrameHeader h;
    h.type = FrameType::WriteRequest;
    h.length = kLength;
    h.seq = 5;
    h.remote_addr = addr(dst.data());
    h.rkey = dst.mr->rkey();
    encode_frame_header(h, frame.data());
    const auto send_and_see_it_read = [&](std::span<const std::byte> bytes) {
        REQUIRE(::write(wire.b.get(), bytes.data(), bytes.size()) ==
                static_cast<ssize_t>(bytes.size()));
        CHECK(eventually([&] {  // the QP has read it all
            int queued = -1;
            return ::ioctl(wire.b.get(), SIOCOUTQ, &queued) == 0 && queued == 0;
        }));
    };
    const long before = resident();
    send_and_see_it_read(frame);
    // The room for the rest is made before the next read: after this one is read.
    send_and_see_it_read(std::span(frame).subspan(kFrameHeaderSize));
    CHECK(resident() - before < (8l << 20));
    CHECK_FALSE(qp->failed());
}

// A WRITE its target did not register is refused from its header, as one complete would be
// (a NAK, the QP fails): its payload, up to the maximum message, is never waited for and
// set aside (a client of l5pgd's soft device could make it hold that much per connection).
TEST_CASE("soft: a WRITE to a range the target did not register is refused from its header",
          "[rdma][soft]") {
    auto [device, pd, wire, qp] = bare_qp();
    connect_to_soft_peer(*qp, 9);
    using namespace l5pg::rdma::soft;
    std::array<std::byte, kFrameHeaderSize> frame{};
    FrameHeader h;
    h.type = FrameType::WriteRequest;
    h.length = 64u << 20;  // the default maximum message; none of it follows
    h.seq = 9;
    h.rkey = 12345;
    encode_frame_header(h, frame.data());
    REQUIRE(::write(wire.b.get(), frame.data(), frame.size()) ==
            static_cast<ssize_t>(frame.size()));
    std::string reason;
    CHECK(eventually([&] { return qp->failed(&reason); }));
    CHECK_THAT(reason, Catch::Contains("rejected the peer's WRITE"));
    std::array<std::byte, kFrameHeaderSize> answer{};
    const timeval bound{5, 0};
    REQUIRE(::setsockopt(wire.b.get(), SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound) == 0);
    REQUIRE(::recv(wire.b.get(), answer.data(), answer.size(), MSG_WAITALL) ==
            static_cast<ssize_t>(answer.size()));
    FrameHeader nak;
    std::string error;
    REQUIRE(decode_frame_header(answer.data(), nak, error));
    CHECK(nak.type == FrameType::Nak);
    CHECK(nak.seq == 9);
}

// Each signaled WRITE owes the peer an Ack; a peer that never reads its wire but keeps
// writing made the QP queue 32 bytes per 33 it sent, without end (any client of l5pgd's
// soft device could grow l5pgd's memory so). An honest peer has at most its send queue's
// depth of requests awaiting a response.
TEST_CASE("soft: a peer that asks for acks and never reads them fails the QP", "[rdma][soft]") {
    auto [device, pd, wire, qp] = bare_qp();
    Region dst = make_region(*pd, 64, kRemote);
    connect_to_soft_peer(*qp, 7);
    using namespace l5pg::rdma::soft;
    std::array<std::byte, kFrameHeaderSize + 1> frame{};
    std::string reason;
    uint64_t sent = 0;
    // Far more than the QP's socket buffer holds of acks, and than kMaxSendQueueDepth.
    for (; sent < 4 * kMaxSendQueueDepth + 100000 && !qp->failed(&reason); ++sent) {
        FrameHeader h;
        h.type = FrameType::WriteRequest;
        h.flags = kFlagAckRequested;
        h.length = 1;
        h.seq = 7 + sent;
        h.remote_addr = addr(dst.data());
        h.rkey = dst.mr->rkey();
        encode_frame_header(h, frame.data());
        pollfd pfd{wire.b.get(), POLLOUT, 0};
        if (::poll(&pfd, 1, 5000) != 1 || (pfd.revents & POLLOUT) == 0)
            break;  // the QP stopped reading: it has failed or is about to
        if (::send(wire.b.get(), frame.data(), frame.size(), MSG_NOSIGNAL) !=
            static_cast<ssize_t>(frame.size()))
            break;
    }
    CHECK(eventually([&] { return qp->failed(&reason); }));
    CHECK_THAT(reason, Catch::Contains("the peer does not read its wire"));
    CHECK(sent < 4 * kMaxSendQueueDepth + 100000);
}
