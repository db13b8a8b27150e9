// Record format and torn-write detection, without any device: RemoteRing stages records
// and describes the WRITEs; the test "delivers" them into a ring that a LocalRing reads,
// in whole or in every partial state a scrambled delivery could produce.
#include <cstring>

#include "test_util.hpp"
#include "transport/rdma/channel/local_ring.hpp"
#include "transport/rdma/channel/remote_ring.hpp"

using namespace l5pg::rdma;
using namespace l5pg::rdma::test;

namespace {

// A remote ring emulated in local memory.
struct RingHarness {
    size_t size;
    Buffer area;
    Buffer staging;
    RemoteRing writer;
    LocalRing reader;

    explicit RingHarness(size_t ring_size, size_t max_payload = 0) : size(ring_size) {
        std::string error;
        auto a = Buffer::allocate(kControlSize + ring_size, error);
        auto s = Buffer::allocate(ring_size, error);
        REQUIRE((a && s));
        area = std::move(*a);
        staging = std::move(*s);
        ::new (static_cast<void*>(area.data())) AreaControl();
        writer = RemoteRing(staging.data(), 1, addr(ring()), 2, ring_size,
                            max_payload ? max_payload : max_record_payload(ring_size));
        reader = LocalRing(control(), ring(), ring_size);
    }
    std::byte* ring() const { return area.data() + kControlSize; }
    AreaControl* control() const { return reinterpret_cast<AreaControl*>(area.data()); }

    // Stages one record and returns its WRITEs (not yet delivered).
    std::vector<WorkRequest> stage(std::span<const std::byte> payload) {
        std::array<WorkRequest, 2> wrs;
        const size_t n = writer.stage(payload, wrs);
        return {wrs.begin(), wrs.begin() + static_cast<ptrdiff_t>(n)};
    }
    static void deliver(const WorkRequest& wr) {
        std::memcpy(reinterpret_cast<std::byte*>(wr.remote_addr), wr.local, wr.length);
    }
    // The reader's position reaches the writer (as an RDMA READ would), all completed.
    void sync_position() {
        REQUIRE(writer.update_read_pos(control()->read_pos.load()));
        writer.note_completed(writer.position());
    }
    std::vector<std::byte> read_all() {
        std::vector<std::byte> out(size);
        RecordState state;
        const size_t n = reader.read(out, state);
        out.resize(n);
        return out;
    }
};

}  // namespace

TEST_CASE("record: staged records read back, wrapping around the ring end", "[rdma][record]") {
    RingHarness h(4096);
    uint64_t seed = 0;
    size_t splits = 0;
    for (int round = 0; round < 200; ++round) {
        const size_t n = 1 + (round * 37) % 1500;
        REQUIRE(h.writer.payload_that_fits() >= n);
        const auto data = pattern(++seed, n);
        const auto wrs = h.stage(data);
        splits += wrs.size() == 2;
        for (const WorkRequest& wr : wrs) {
            REQUIRE(wr.remote_addr >= addr(h.ring()));
            REQUIRE(wr.remote_addr + wr.length <= addr(h.ring()) + h.size);  // never past the end
            RingHarness::deliver(wr);
        }
        REQUIRE(h.reader.check() == RecordState::Ready);
        REQUIRE(h.read_all() == data);
        REQUIRE(h.reader.check() == RecordState::Empty);
        h.sync_position();
    }
    CHECK(splits > 0);
    // Everything consumed was zeroed again.
    for (size_t i = 0; i < h.size; ++i)
        REQUIRE(h.ring()[i] == std::byte{0});
}

TEST_CASE("record: a reader may consume a record in pieces", "[rdma][record]") {
    RingHarness h(4096);
    const auto data = pattern(9, 1000);
    for (const WorkRequest& wr : h.stage(data))
        RingHarness::deliver(wr);
    std::vector<std::byte> got;
    std::array<std::byte, 7> piece;
    RecordState state = RecordState::Ready;
    while (got.size() < data.size()) {
        const size_t n = h.reader.read(piece, state);
        REQUIRE(n > 0);
        got.insert(got.end(), piece.begin(), piece.begin() + static_cast<ptrdiff_t>(n));
        // The position moves only once the whole record is read.
        CHECK(h.control()->read_pos.load() ==
              (got.size() == data.size() ? record_footprint(1000) : 0));
    }
    CHECK(got == data);
}

TEST_CASE("record: every torn state of a WRITE is recognised as in flight", "[rdma][record]") {
    // The delivery model of the soft device's scramble mode: any subset of the bytes
    // before the OK byte may have landed; the OK byte lands last. Lengths whose bytes
    // include 0x00 and 0xff are the cases a weaker header check would get wrong.
    for (const uint32_t len : {1u, 5u, 255u, 256u, 511u, 1791u, 2000u}) {
        CAPTURE(len);
        const auto data = pattern(len, len);
        for (unsigned landed = 0; landed < 256; ++landed) {  // which of the 8 header bytes
            for (const bool payload_landed : {false, true}) {
                RingHarness h(4096);
                const auto wrs = h.stage(data);
                REQUIRE(wrs.size() == 1);
                const std::byte* src = wrs[0].local;
                std::byte* dst = h.ring();
                for (unsigned b = 0; b < 8; ++b) {
                    if ((landed >> b) & 1)
                        dst[b] = src[b];
                }
                if (payload_landed)
                    std::memcpy(dst + 8, src + 8, len);
                const RecordState state = h.reader.check();
                CAPTURE(landed, payload_landed, to_string(state));
                REQUIRE((state == RecordState::Empty || state == RecordState::InFlight));
                if (landed == 255 && payload_landed) {
                    dst[8 + len] = src[8 + len];  // the OK byte, last
                    REQUIRE(h.reader.check() == RecordState::Ready);
                    REQUIRE(h.read_all() == data);
                }
            }
        }
    }
}

TEST_CASE("record: impossible records are corrupt, not in flight", "[rdma][record]") {
    RingHarness h(4096);
    std::byte* r = h.ring();
    auto put32 = [&](size_t off, uint32_t v) { std::memcpy(r + off, &v, 4); };
    SECTION("length zero with a consistent check word") {
        put32(0, 0);
        put32(4, ~0u);
        CHECK(h.reader.check() == RecordState::Corrupt);
    }
    SECTION("length beyond half the ring") {
        put32(0, 4000);
        put32(4, ~4000u);
        CHECK(h.reader.check() == RecordState::Corrupt);
        CHECK_THAT(h.reader.corrupt_reason(), Catch::Contains("length"));
    }
    SECTION("an OK byte that is neither 0 nor 1") {
        put32(0, 10);
        put32(4, ~10u);
        r[8 + 10] = std::byte{7};
        CHECK(h.reader.check() == RecordState::Corrupt);
    }
    SECTION("inconsistent header stays in flight") {
        put32(0, 10);
        put32(4, 12345);
        CHECK(h.reader.check() == RecordState::InFlight);
    }
}

TEST_CASE("record: the writer rejects impossible reader positions", "[rdma][record]") {
    RingHarness h(4096);
    for (int i = 0; i < 3; ++i)
        (void)h.stage(pattern(i, 100));
    const uint64_t written = h.writer.position();
    CHECK_FALSE(h.writer.update_read_pos(written + 8));  // beyond what we wrote
    CHECK_FALSE(h.writer.update_read_pos(12));           // misaligned
    CHECK(h.writer.update_read_pos(record_footprint(100)));
    CHECK_FALSE(h.writer.update_read_pos(0));  // backwards
}

TEST_CASE("record: staging is reused only after the reader consumed and the WRITE completed",
          "[rdma][record]") {
    RingHarness h(4096);
    const size_t max = h.writer.payload_that_fits();
    CHECK(max == max_record_payload(4096));
    (void)h.stage(pattern(1, max));
    (void)h.stage(pattern(2, max));
    CHECK(h.writer.payload_that_fits() == 0);
    REQUIRE(h.writer.update_read_pos(record_footprint(max)));  // consumed, not completed
    CHECK(h.writer.payload_that_fits() == 0);
    h.writer.note_completed(h.writer.position());
    CHECK(h.writer.payload_that_fits() > 0);
}
