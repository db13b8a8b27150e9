#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "transport/shm/layout.hpp"
#include "transport/shm/ring.hpp"
#include "transport/wait/wait_id.hpp"

using namespace l5pg::shm;
using l5pg::shm::test::pattern;
using l5pg::shm::test::RingPair;

namespace {

using Bytes = std::vector<std::byte>;

// Writes one record of exactly `n` payload bytes (must fit) and returns its content.
Bytes put_record(RingWriter& w, size_t n, uint64_t seed) {
    std::span<std::byte> space;
    REQUIRE(w.reserve(n, space) == RingStatus::Ok);
    REQUIRE(space.size() == n);
    Bytes content = pattern(seed, n);
    std::memcpy(space.data(), content.data(), n);
    w.commit(n);
    return content;
}

// Reads one whole record via peek/consume.
Bytes get_record(RingReader& r) {
    std::span<const std::byte> data;
    REQUIRE(r.peek(data) == RingStatus::Ok);
    Bytes out(data.begin(), data.end());
    r.consume(data.size());
    return out;
}

// Moves both positions forward by `bytes` (a multiple of 8) with filler records.
void advance(RingPair& p, size_t bytes) {
    REQUIRE(bytes % kRecordAlign == 0);
    while (bytes > 0) {
        const size_t fp = std::min(bytes, record_footprint(max_record_payload(p.size())));
        const size_t payload = fp - kRecordHeaderSize;
        REQUIRE(record_footprint(payload) == fp);
        const Bytes put = put_record(p.writer, payload, fp);
        REQUIRE(get_record(p.reader) == put);
        bytes -= fp;
    }
}

Bytes read_all(RingReader& r, size_t max = SIZE_MAX) {
    Bytes out;
    for (;;) {
        std::span<const std::byte> data;
        const RingStatus s = r.peek(data);
        if (s == RingStatus::Empty)
            break;
        REQUIRE(s == RingStatus::Ok);
        const size_t n = std::min(data.size(), max - out.size());
        out.insert(out.end(), data.begin(), data.begin() + static_cast<ptrdiff_t>(n));
        r.consume(n);
        if (out.size() == max)
            break;
    }
    return out;
}

}  // namespace

TEST_CASE("Ring: layout helpers", "[shm][ring]") {
    CHECK(valid_ring_size(kMinRingSize));
    CHECK(valid_ring_size(kMaxRingSize));
    CHECK_FALSE(valid_ring_size(kMinRingSize / 2));
    CHECK_FALSE(valid_ring_size(kMaxRingSize * 2));
    CHECK_FALSE(valid_ring_size(kMinRingSize + 8));
    CHECK_FALSE(valid_ring_size(0));
    CHECK(max_record_payload(4096) == 2044);
    CHECK(record_footprint(1) == 8);
    CHECK(record_footprint(4) == 8);
    CHECK(record_footprint(5) == 16);
    CHECK(record_footprint(2044) == 2048);
    CHECK(std::string(to_string(RingStatus::Ok)) == "ok");
    CHECK(std::string(to_string(RingStatus::Empty)) == "empty");
    CHECK(std::string(to_string(RingStatus::Full)) == "full");
    CHECK(std::string(to_string(RingStatus::Corrupt)) == "corrupt");
}

TEST_CASE("Ring: basic write and read", "[shm][ring]") {
    RingPair p;
    CHECK(p.writer.size() == 4096);
    CHECK(p.reader.size() == 4096);
    CHECK(p.writer.empty());
    CHECK_FALSE(p.reader.has_data());
    std::span<const std::byte> data;
    CHECK(p.reader.peek(data) == RingStatus::Empty);
    Bytes buf(10);
    RingStatus s;
    CHECK(p.reader.read(buf, s) == 0);
    CHECK(s == RingStatus::Empty);

    const Bytes msg = pattern(1, 5);
    CHECK(p.writer.write(msg, s) == 5);
    CHECK(s == RingStatus::Ok);
    CHECK(p.writer.position() == 16);
    // The length word publishes the record; the next record's word is zero.
    uint32_t word = 0;
    std::memcpy(&word, p.data(), 4);
    CHECK(word == 5);
    std::memcpy(&word, p.data() + 16, 4);
    CHECK(word == 0);
    CHECK_FALSE(p.writer.empty());
    CHECK(p.reader.has_data());
    CHECK(p.reader.read(buf, s) == 5);
    CHECK(s == RingStatus::Ok);
    CHECK(Bytes(buf.begin(), buf.begin() + 5) == msg);
    CHECK(p.reader.position() == 16);
    CHECK(p.control().read_pos.load() == 16);
    CHECK(p.writer.empty());
    CHECK_FALSE(p.reader.has_data());

    // Empty writes do nothing.
    CHECK(p.writer.write({}, s) == 0);
    CHECK(s == RingStatus::Ok);
    CHECK(p.writer.position() == 16);
}

TEST_CASE("Ring: wrap-around at every offset", "[shm][ring]") {
    const std::vector<size_t> sizes{1,   2,   3,    4,    5,    7,    8,    9,    11,
                                    12,  13,  15,   16,   17,   63,   64,   65,   100,
                                    255, 256, 1000, 1023, 1024, 1025, 2000, 2043, 2044};
    for (size_t start = 0; start <= kMinRingSize; start += kRecordAlign) {
        RingPair p;
        advance(p, start);
        REQUIRE(p.writer.position() == start);
        REQUIRE(p.reader.position() == start);
        uint64_t seed = start * 1000;
        // Single records of each size, straddling the end for some starts.
        for (const size_t n : sizes) {
            const Bytes put = put_record(p.writer, n, ++seed);
            const Bytes got = get_record(p.reader);
            if (got != put)
                FAIL("start " << start << " size " << n << ": content differs");
        }
        // Several records in flight at once across the wrap, read with read() in
        // odd-sized pieces.
        Bytes stream;
        for (const size_t n : {3, 700, 1, 900, 13, 1200}) {
            const Bytes put = put_record(p.writer, n, ++seed);
            stream.insert(stream.end(), put.begin(), put.end());
        }
        Bytes got;
        RingStatus s = RingStatus::Ok;
        while (s == RingStatus::Ok) {
            Bytes piece(37);
            const size_t n = p.reader.read(piece, s);
            got.insert(got.end(), piece.begin(), piece.begin() + static_cast<ptrdiff_t>(n));
        }
        CHECK(s == RingStatus::Empty);
        if (got != stream)
            FAIL("start " << start << ": multi-record stream differs");
        CHECK(p.writer.empty());
        CHECK(p.writer.position() == p.reader.position());
    }
}

TEST_CASE("Ring: filling up loses and reorders nothing", "[shm][ring]") {
    RingPair p;
    const Bytes msg = pattern(7, 10000);
    RingStatus s;
    size_t sent = p.writer.write(msg, s);
    CHECK(s == RingStatus::Ok);  // a short write is still Ok
    CHECK(sent > 0);
    CHECK(sent < msg.size());
    CHECK(sent <= 4096);
    CHECK(p.writer.free_bytes() == 0);
    std::span<std::byte> space;
    CHECK(p.writer.reserve(1, space) == RingStatus::Full);
    CHECK(p.writer.write(std::span(msg).subspan(sent), s) == 0);
    CHECK(s == RingStatus::Full);

    Bytes got;
    while (got.size() < msg.size()) {
        const Bytes piece = read_all(p.reader, 1500);
        REQUIRE_FALSE(piece.empty());
        got.insert(got.end(), piece.begin(), piece.end());
        if (sent < msg.size()) {
            const size_t n = p.writer.write(std::span(msg).subspan(sent), s);
            CHECK((s == RingStatus::Ok || (n == 0 && s == RingStatus::Full)));
            sent += n;
        }
    }
    CHECK(sent == msg.size());
    CHECK(got == msg);
    CHECK(p.writer.empty());
    CHECK(p.writer.free_bytes() == max_record_payload(4096));
}

TEST_CASE("Ring: fills up to the next record's length word", "[shm][ring]") {
    RingPair p;
    // 3 records of footprint 1024, then 1024 - 8 bytes (the last 8 hold the next
    // record's length word): payload 1012, footprint 1016.
    for (int i = 0; i < 3; ++i)
        put_record(p.writer, 1020, i);
    CHECK(p.writer.free_bytes() == 1012);
    put_record(p.writer, 1012, 3);
    CHECK(p.writer.position() == 4096 - kRecordAlign);
    std::span<std::byte> space;
    CHECK(p.writer.reserve(1, space) == RingStatus::Full);
    CHECK(p.writer.free_bytes() == 0);
    // Freeing one record frees its footprint.
    CHECK(get_record(p.reader) == pattern(0, 1020));
    CHECK(p.writer.free_bytes() == 1020);
    REQUIRE(p.writer.reserve(5000, space) == RingStatus::Ok);
    CHECK(space.size() == 1020);
    p.writer.commit(1020);
    CHECK(p.writer.reserve(1, space) == RingStatus::Full);
    for (int i = 1; i < 3; ++i)
        CHECK(get_record(p.reader) == pattern(i, 1020));
    CHECK(get_record(p.reader) == pattern(3, 1012));
    CHECK(get_record(p.reader).size() == 1020);
    CHECK(p.writer.empty());
}

TEST_CASE("Ring: space of exactly one header is full", "[shm][ring]") {
    RingPair p;
    // Leave 16 free bytes: a record of footprint 8 (payload 1..4) plus the next length
    // word still fit; after it, the 8 bytes left are only the next length word.
    put_record(p.writer, 2044, 1);
    put_record(p.writer, 2028, 2);  // footprint 2032
    std::span<std::byte> space;
    REQUIRE(p.writer.reserve(100, space) == RingStatus::Ok);
    CHECK(space.size() == 4);
    p.writer.commit(4);
    CHECK(p.writer.position() == 4096 - kRecordAlign);
    CHECK(p.writer.reserve(1, space) == RingStatus::Full);
    CHECK(get_record(p.reader) == pattern(1, 2044));
    CHECK(get_record(p.reader) == pattern(2, 2028));
    CHECK(get_record(p.reader).size() == 4);
}

TEST_CASE("Ring: 1-byte messages", "[shm][ring]") {
    RingPair p;
    RingStatus s;
    // 2000 one-byte records: each takes 8 bytes, wrapping the 4 KiB ring several times.
    for (int i = 0; i < 2000; ++i) {
        const std::byte b{static_cast<unsigned char>(i)};
        REQUIRE(p.writer.write({&b, 1}, s) == 1);
        if (i % 3 == 2) {
            for (int k = 0; k < 3; ++k) {
                std::byte got{};
                REQUIRE(p.reader.read({&got, 1}, s) == 1);
                REQUIRE(got == std::byte{static_cast<unsigned char>(i - 2 + k)});
            }
        }
    }
    CHECK(p.writer.position() == 2000 * 8);
    Bytes rest = read_all(p.reader);
    CHECK(rest.size() == 2000 % 3);
    // Fill with 1-byte records: 512 fit.
    RingPair q;
    int n = 0;
    for (;;) {
        const std::byte b{1};
        if (q.writer.write({&b, 1}, s) == 0)
            break;
        ++n;
    }
    CHECK(s == RingStatus::Full);
    CHECK(n == 511);  // 4096 / 8, less the slot of the next length word
}

TEST_CASE("Ring: multi-MB message through a 1 MiB ring", "[shm][ring]") {
    RingPair p(size_t{1} << 20);
    const Bytes msg = pattern(99, size_t{4} << 20);
    Bytes got;
    got.reserve(msg.size());
    size_t sent = 0;
    std::mt19937 rng(12345);
    std::uniform_int_distribution<size_t> wsize(1, 700000);
    std::uniform_int_distribution<size_t> rsize(1, 900000);
    size_t rounds = 0;
    while (got.size() < msg.size()) {
        ++rounds;
        REQUIRE(rounds < 100000);
        if (sent < msg.size()) {
            const size_t want = std::min(wsize(rng), msg.size() - sent);
            RingStatus s;
            const size_t n = p.writer.write(std::span(msg).subspan(sent, want), s);
            REQUIRE(s != RingStatus::Corrupt);
            sent += n;
        }
        Bytes buf(rsize(rng));
        RingStatus s;
        const size_t n = p.reader.read(buf, s);
        REQUIRE(s != RingStatus::Corrupt);
        got.insert(got.end(), buf.begin(), buf.begin() + static_cast<ptrdiff_t>(n));
    }
    CHECK(sent == msg.size());
    CHECK(got.size() == msg.size());
    CHECK(got == msg);
    CHECK(p.writer.empty());
}

TEST_CASE("Ring: reserve and partial commit", "[shm][ring]") {
    RingPair p;
    std::span<std::byte> space;
    REQUIRE(p.writer.reserve(100, space) == RingStatus::Ok);
    CHECK(space.size() == 100);
    CHECK(reinterpret_cast<uintptr_t>(space.data()) % 4 == 0);
    std::memset(space.data(), 'a', 100);
    p.writer.commit(40);
    CHECK(p.writer.position() == record_footprint(40));
    Bytes rec = get_record(p.reader);
    CHECK(rec == Bytes(40, std::byte{'a'}));

    // Nothing published before commit.
    REQUIRE(p.writer.reserve(10, space) == RingStatus::Ok);
    std::memset(space.data(), 'b', 10);
    CHECK_FALSE(p.reader.has_data());
    // commit(0) publishes nothing; a later commit without reserve does nothing either.
    p.writer.commit(0);
    CHECK_FALSE(p.reader.has_data());
    p.writer.commit(10);
    CHECK_FALSE(p.reader.has_data());
    CHECK(p.writer.position() == record_footprint(40));

    // commit(n) with n above the reservation is capped.
    REQUIRE(p.writer.reserve(10, space) == RingStatus::Ok);
    std::memset(space.data(), 'c', 10);
    p.writer.commit(1000);
    CHECK(get_record(p.reader) == Bytes(10, std::byte{'c'}));

    // reserve(0) asks for at least one byte.
    REQUIRE(p.writer.reserve(0, space) == RingStatus::Ok);
    CHECK(space.size() == 1);
    space[0] = std::byte{'d'};
    p.writer.commit(1);
    CHECK(get_record(p.reader) == Bytes{std::byte{'d'}});

    // A reservation larger than what is left returns what is left.
    put_record(p.writer, 2044, 3);
    put_record(p.writer, 1500, 4);
    const size_t left = p.writer.free_bytes();
    CHECK(left == 4096 - 2048 - record_footprint(1500) - kRecordAlign - kRecordHeaderSize);
    REQUIRE(p.writer.reserve(2000, space) == RingStatus::Ok);
    CHECK(space.size() == left);
    p.writer.commit(space.size());
    CHECK(get_record(p.reader) == pattern(3, 2044));
    CHECK(get_record(p.reader) == pattern(4, 1500));
    CHECK(get_record(p.reader).size() == left);
}

TEST_CASE("Ring: large writes are split at max_record_payload", "[shm][ring]") {
    SECTION("4 KiB ring") {
        RingPair p;
        const size_t max = max_record_payload(4096);
        std::span<std::byte> space;
        REQUIRE(p.writer.reserve(100000, space) == RingStatus::Ok);
        CHECK(space.size() == max);
        p.writer.commit(0);

        const Bytes msg = pattern(5, 5000);
        RingStatus s;
        // The second record is short by the next record's length word.
        CHECK(p.writer.write(msg, s) == 2 * max - kRecordAlign);
        CHECK(s == RingStatus::Ok);
        std::span<const std::byte> data;
        REQUIRE(p.reader.peek(data) == RingStatus::Ok);
        CHECK(data.size() == max);
        CHECK(Bytes(data.begin(), data.end()) == Bytes(msg.begin(), msg.begin() + max));
        p.reader.consume(max);
        REQUIRE(p.reader.peek(data) == RingStatus::Ok);
        CHECK(data.size() == max - kRecordAlign);
        p.reader.consume(data.size());
        CHECK(p.reader.peek(data) == RingStatus::Empty);
    }
    SECTION("1 MiB ring") {
        RingPair p(size_t{1} << 20);
        const size_t max = max_record_payload(size_t{1} << 20);
        const Bytes msg = pattern(6, max + 1000);
        RingStatus s;
        CHECK(p.writer.write(msg, s) == msg.size());
        std::span<const std::byte> data;
        REQUIRE(p.reader.peek(data) == RingStatus::Ok);
        CHECK(data.size() == max);
        p.reader.consume(max);
        REQUIRE(p.reader.peek(data) == RingStatus::Ok);
        CHECK(data.size() == 1000);
        CHECK(Bytes(data.begin(), data.end()) == Bytes(msg.begin() + max, msg.end()));
    }
}

TEST_CASE("Ring: peek_ahead sees across records and consumes nothing", "[shm][ring]") {
    RingPair p;
    const Bytes a = put_record(p.writer, 3, 1);
    const Bytes b = put_record(p.writer, 5, 2);
    Bytes both = a;
    both.insert(both.end(), b.begin(), b.end());
    RingStatus status;
    Bytes out(16);
    CHECK(p.reader.unread_bytes() == 8);
    REQUIRE(p.reader.peek_ahead(out, 0, status) == 8);
    CHECK(status == RingStatus::Ok);
    CHECK(Bytes(out.begin(), out.begin() + 8) == both);
    Bytes four(4);  // a buffer that ends inside the second record
    REQUIRE(p.reader.peek_ahead(four, 0, status) == 4);
    CHECK(four == Bytes(both.begin(), both.begin() + 4));
    // After a partial consume, from where the reader stands.
    std::span<const std::byte> data;
    REQUIRE(p.reader.peek(data) == RingStatus::Ok);
    p.reader.consume(2);
    CHECK(p.reader.unread_bytes() == 6);
    REQUIRE(p.reader.peek_ahead(out, 0, status) == 6);
    CHECK(Bytes(out.begin(), out.begin() + 6) == Bytes(both.begin() + 2, both.end()));
    // Nothing consumed: read() gets the same bytes.
    CHECK(p.reader.read(out, status) == 6);
    CHECK(p.reader.peek_ahead(out, 0, status) == 0);
    CHECK(status == RingStatus::Empty);
    CHECK(p.reader.unread_bytes() == 0);
}

TEST_CASE("Ring: peek_ahead skips across records", "[shm][ring]") {
    RingPair p;
    Bytes all = put_record(p.writer, 3, 1);
    const Bytes b = put_record(p.writer, 5, 2);
    const Bytes c = put_record(p.writer, 4, 3);
    all.insert(all.end(), b.begin(), b.end());
    all.insert(all.end(), c.begin(), c.end());
    RingStatus status;
    Bytes out(16);
    // From inside the second record on, across into the third.
    REQUIRE(p.reader.peek_ahead(out, 5, status) == 7);
    CHECK(status == RingStatus::Ok);
    CHECK(Bytes(out.begin(), out.begin() + 7) == Bytes(all.begin() + 5, all.end()));
    // A skip that ends on a record boundary, and one past everything published.
    REQUIRE(p.reader.peek_ahead(out, 8, status) == 4);
    CHECK(Bytes(out.begin(), out.begin() + 4) == c);
    CHECK(p.reader.peek_ahead(out, 12, status) == 0);
    CHECK(status == RingStatus::Empty);
    // The skip counts from the reader's position inside a record.
    std::span<const std::byte> data;
    REQUIRE(p.reader.peek(data) == RingStatus::Ok);
    p.reader.consume(1);
    REQUIRE(p.reader.peek_ahead(out, 2, status) == 9);
    CHECK(Bytes(out.begin(), out.begin() + 9) == Bytes(all.begin() + 3, all.end()));
}

TEST_CASE("Ring: peek_ahead does not walk more than one lap of hostile records", "[shm][ring]") {
    RingPair p;
    // Every slot holds a plausible length word: the records chain around the ring forever.
    const size_t footprint = record_footprint(8);
    for (size_t at = 0; at < p.size(); at += footprint)
        std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(p.data() + at)).store(8);
    RingStatus status;
    Bytes out(16);
    CHECK(p.reader.peek_ahead(out, size_t{1} << 40, status) == 0);
    CHECK(status == RingStatus::Corrupt);
    // Copying stops at the lap too, after what one lap holds.
    Bytes big(2 * p.size());
    CHECK(p.reader.peek_ahead(big, 0, status) == 8 * (p.size() / footprint));
    CHECK(status == RingStatus::Corrupt);
    CHECK(p.reader.unread_bytes() == 8 * (p.size() / footprint));  // FIONREAD's count too
}

TEST_CASE("Ring: peek_ahead stops at an impossible record", "[shm][ring]") {
    RingPair p;
    const Bytes a = put_record(p.writer, 3, 1);
    (void)put_record(p.writer, 5, 2);
    // The second record's length word, beyond the first record's footprint, made impossible.
    std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(p.data() + record_footprint(3)))
        .store(0xffffffffu);
    RingStatus status;
    Bytes out(16);
    CHECK(p.reader.peek_ahead(out, 0, status) == 3);
    CHECK(status == RingStatus::Corrupt);
    CHECK(Bytes(out.begin(), out.begin() + 3) == a);
    CHECK(p.reader.unread_bytes() == 3);
}

TEST_CASE("Ring: partial peek/consume", "[shm][ring]") {
    RingPair p;
    const Bytes a = put_record(p.writer, 100, 1);
    const Bytes b = put_record(p.writer, 3, 2);
    std::span<const std::byte> data;

    // consume() before any peek does nothing.
    p.reader.consume(10);
    CHECK(p.reader.position() == 0);

    REQUIRE(p.reader.peek(data) == RingStatus::Ok);
    CHECK(data.size() == 100);
    p.reader.consume(0);
    REQUIRE(p.reader.peek(data) == RingStatus::Ok);
    CHECK(data.size() == 100);
    p.reader.consume(30);
    REQUIRE(p.reader.peek(data) == RingStatus::Ok);
    CHECK(data.size() == 70);
    CHECK(Bytes(data.begin(), data.end()) == Bytes(a.begin() + 30, a.end()));
    // The record is not released until fully consumed.
    CHECK(p.reader.position() == 0);
    CHECK(p.control().read_pos.load() == 0);
    p.reader.consume(69);
    REQUIRE(p.reader.peek(data) == RingStatus::Ok);
    CHECK(data.size() == 1);
    CHECK(data[0] == a[99]);
    CHECK(p.control().read_pos.load() == 0);
    // Consuming more than is left is capped at the record end.
    p.reader.consume(50);
    CHECK(p.reader.position() == record_footprint(100));
    CHECK(p.control().read_pos.load() == record_footprint(100));
    REQUIRE(p.reader.peek(data) == RingStatus::Ok);
    CHECK(Bytes(data.begin(), data.end()) == b);

    // read() across records with a small buffer.
    put_record(p.writer, 10, 3);
    Bytes buf(5);
    RingStatus s;
    CHECK(p.reader.read(buf, s) == 5);
    CHECK(Bytes(buf.begin(), buf.begin() + 3) == b);
    CHECK(Bytes(buf.begin() + 3, buf.end()) == pattern(3, 2));
    CHECK(p.reader.read(buf, s) == 5);
    CHECK(buf == pattern(3, 5, 2));
    CHECK(p.reader.read(buf, s) == 3);
    CHECK(s == RingStatus::Ok);
    CHECK(p.reader.read(buf, s) == 0);
    CHECK(s == RingStatus::Empty);
}

TEST_CASE("Ring: Dekker flags", "[shm][ring]") {
    RingPair p;
    SECTION("reader arms, writer sees it once") {
        CHECK_FALSE(p.writer.reader_needs_wakeup());
        p.reader.arm();
        CHECK(p.control().reader_waiting.load() == 1);
        CHECK(p.writer.reader_needs_wakeup());
        CHECK(p.control().reader_waiting.load() == 0);
        CHECK_FALSE(p.writer.reader_needs_wakeup());
        // Disarm after the writer consumed the flag: false (a doorbell is on its way).
        p.reader.arm();
        CHECK(p.writer.reader_needs_wakeup());
        CHECK_FALSE(p.reader.disarm());
        // Disarm before: true, and the writer then sees nothing.
        p.reader.arm();
        CHECK(p.reader.disarm());
        CHECK_FALSE(p.writer.reader_needs_wakeup());
        CHECK_FALSE(p.reader.disarm());
        // Arming twice is one wake-up.
        p.reader.arm();
        p.reader.arm();
        CHECK(p.writer.reader_needs_wakeup());
        CHECK_FALSE(p.writer.reader_needs_wakeup());
    }
    SECTION("writer arms, reader sees it once") {
        CHECK_FALSE(p.reader.writer_needs_wakeup());
        p.writer.arm();
        CHECK(p.control().writer_waiting.load() == 1);
        CHECK(p.reader.writer_needs_wakeup());
        CHECK(p.control().writer_waiting.load() == 0);
        CHECK_FALSE(p.reader.writer_needs_wakeup());
        p.writer.arm();
        CHECK(p.reader.writer_needs_wakeup());
        CHECK_FALSE(p.writer.disarm());
        p.writer.arm();
        CHECK(p.writer.disarm());
        CHECK_FALSE(p.reader.writer_needs_wakeup());
    }
    SECTION("the flags are independent") {
        p.reader.arm();
        CHECK_FALSE(p.reader.writer_needs_wakeup());
        p.writer.arm();
        CHECK(p.reader.writer_needs_wakeup());
        CHECK(p.writer.reader_needs_wakeup());
    }
    SECTION("the writer learns the name of the wait that armed the flag") {
        uint64_t wait_id = 7;
        p.reader.arm(0x1234'5678'9abc'def0ull);
        CHECK(p.writer.reader_needs_wakeup(wait_id));
        CHECK(wait_id == 0x1234'5678'9abc'def0ull);
        // An unnamed arming replaces the name: the writer rings whatever it rang before.
        p.reader.arm();
        CHECK(p.writer.reader_needs_wakeup(wait_id));
        CHECK(wait_id == l5pg::wait::kUnnamedWait);
        // No flag, no name: the caller's variable is left alone.
        wait_id = 7;
        CHECK_FALSE(p.writer.reader_needs_wakeup(wait_id));
        CHECK(wait_id == 7);
    }
    SECTION("arm, then re-check sees data published before") {
        put_record(p.writer, 8, 1);
        p.reader.arm();
        CHECK(p.reader.has_data());
        CHECK(p.reader.disarm());
    }
}

// ------------------------------------------------------------------ hostile peers

TEST_CASE("Ring: stale bytes from an earlier lap are never a record", "[shm][ring]") {
    RingPair p;
    // Garbage that looks like valid lengths everywhere, as if left by earlier laps.
    for (size_t i = 0; i < p.size(); i += 4) {
        const uint32_t len = 8;
        std::memcpy(p.data() + i, &len, 4);
    }
    // ...but the reader's first word must be 0 until something is published: a fresh
    // segment is zero-filled, so only position 0 needs restoring here.
    std::memset(p.data(), 0, 4);
    CHECK_FALSE(p.reader.has_data());
    for (const size_t n : {3, 100, 1, 700, 8}) {
        const Bytes put = put_record(p.writer, n, n);
        CHECK(get_record(p.reader) == put);
        // Each commit zeroed the following word, so the garbage there is not a record.
        std::span<const std::byte> data;
        CHECK(p.reader.peek(data) == RingStatus::Empty);
        CHECK_FALSE(p.reader.has_data());
    }
}

TEST_CASE("Ring: hostile writer record lengths", "[shm][ring][hostile]") {
    RingPair p;
    std::span<const std::byte> data;
    put_record(p.writer, 8, 1);  // footprint 16
    auto set_length = [&](uint32_t len) { std::memcpy(p.data(), &len, 4); };
    SECTION("zero is nothing published") {
        set_length(0);
        CHECK(p.reader.peek(data) == RingStatus::Empty);
        CHECK_FALSE(p.reader.has_data());
    }
    SECTION("above the maximum payload") {
        for (const uint32_t len : {uint32_t{2045}, uint32_t{4092}, uint32_t{4096}, 0xffffffffu}) {
            INFO("length " << len);
            set_length(len);
            RingReader r(p.control(), p.data(), p.size());
            CHECK(r.has_data());  // Corrupt counts as data: peek reports it
            CHECK(r.peek(data) == RingStatus::Corrupt);
            Bytes buf(16);
            RingStatus s;
            CHECK(r.read(buf, s) == 0);
            CHECK(s == RingStatus::Corrupt);
        }
    }
    SECTION("beyond what was written, the bytes handed out stay inside the mapping") {
        // At the very end of the ring a maximal length runs into the second mapping.
        RingPair q;
        advance(q, 4096 - kRecordAlign);
        const uint32_t len = static_cast<uint32_t>(max_record_payload(q.size()));
        std::memcpy(q.data() + 4096 - kRecordAlign, &len, 4);
        REQUIRE(q.reader.peek(data) == RingStatus::Ok);
        CHECK(data.size() == len);
        CHECK(data.data() + data.size() <= q.data() + 2 * q.size());
    }
    SECTION("length rewritten after it was validated is not re-read") {
        REQUIRE(p.reader.peek(data) == RingStatus::Ok);
        p.reader.consume(2);
        set_length(0xffffffffu);
        REQUIRE(p.reader.peek(data) == RingStatus::Ok);
        CHECK(data.size() == 6);
        p.reader.consume(6);
        CHECK(p.reader.position() == 16);
    }
}

TEST_CASE("Ring: hostile writer fuzz never reads out of bounds", "[shm][ring][hostile]") {
    std::mt19937_64 rng(42);
    size_t checked = 0;
    for (int round = 0; round < 2000; ++round) {
        RingPair p;
        // Garbage everywhere, then a random mix of real records and scribbles.
        for (size_t i = 0; i < p.size(); i += 4) {
            const uint32_t v = static_cast<uint32_t>(rng() % 5 == 0 ? rng() % 4200 : rng());
            std::memcpy(p.data() + i, &v, 4);
        }
        bool corrupt = false;
        for (int step = 0; step < 200 && !corrupt; ++step) {
            // Scribble a plausible or absurd length anywhere (4-aligned, as lengths are).
            const uint32_t v = static_cast<uint32_t>(rng() % 2 == 0 ? rng() % 3000 : rng());
            std::memcpy(p.data() + (rng() % p.size() & ~size_t{3}), &v, 4);
            for (int k = 0; k < 8; ++k) {
                std::span<const std::byte> data;
                const RingStatus s = p.reader.peek(data);
                if (s == RingStatus::Corrupt) {
                    corrupt = true;
                    break;
                }
                if (s == RingStatus::Empty)
                    break;
                // Whatever we were handed lies inside the double mapping.
                if (data.empty() || data.data() < p.data() ||
                    data.data() + data.size() > p.data() + 2 * p.size() ||
                    data.size() > max_record_payload(p.size()))
                    FAIL("round " << round << ": peek returned a span outside the ring");
                volatile std::byte sink = data[data.size() - 1];
                (void)sink;
                p.reader.consume(rng() % (data.size() + 1));
                ++checked;
            }
        }
    }
    CHECK(checked > 0);  // some records were accepted, so the walk went past garbage
}

TEST_CASE("Ring: hostile reader positions", "[shm][ring][hostile]") {
    RingPair p;
    std::span<std::byte> space;
    // Fill the ring so the next reserve must look at read_pos.
    put_record(p.writer, 2044, 1);
    put_record(p.writer, 2036, 2);
    REQUIRE(p.writer.reserve(1, space) == RingStatus::Full);

    SECTION("beyond write_pos") {
        p.control().read_pos.store(4096 + 8);
        CHECK(p.writer.reserve(1, space) == RingStatus::Corrupt);
        CHECK(p.writer.free_bytes() == 0);
        CHECK_FALSE(p.writer.empty());
        RingStatus s;
        const std::byte b{1};
        CHECK(p.writer.write({&b, 1}, s) == 0);
        CHECK(s == RingStatus::Corrupt);
    }
    SECTION("far beyond") {
        p.control().read_pos.store(~uint64_t{7});
        CHECK(p.writer.reserve(1, space) == RingStatus::Corrupt);
    }
    SECTION("misaligned") {
        for (const uint64_t pos : {uint64_t{4}, uint64_t{2049}, uint64_t{4095}}) {
            INFO("read_pos " << pos);
            p.control().read_pos.store(pos);
            CHECK(p.writer.reserve(1, space) == RingStatus::Corrupt);
        }
    }
    SECTION("backwards") {
        CHECK(get_record(p.reader) == pattern(1, 2044));
        REQUIRE(p.writer.reserve(2044, space) == RingStatus::Ok);  // caches read_pos 2048
        p.writer.commit(2044);
        REQUIRE(p.writer.reserve(1, space) == RingStatus::Full);
        p.control().read_pos.store(0);
        CHECK(p.writer.reserve(1, space) == RingStatus::Corrupt);
        p.control().read_pos.store(2040);
        CHECK(p.writer.reserve(1, space) == RingStatus::Corrupt);
        // The honest value is fine again.
        p.control().read_pos.store(2048);
        CHECK(p.writer.reserve(1, space) == RingStatus::Full);
    }
    SECTION("valid advance frees space") {
        p.control().read_pos.store(2048);
        REQUIRE(p.writer.reserve(5000, space) == RingStatus::Ok);
        CHECK(space.size() == 2044);
    }
}
