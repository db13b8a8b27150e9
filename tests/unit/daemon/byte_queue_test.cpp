#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "daemon/byte_queue.hpp"

using l5pg::daemon::ByteQueue;

namespace {

constexpr size_t kChunk = 64 * 1024;
constexpr size_t kHighWater = 256 * 1024;

// Fills like Session::read_upstream_into_queue (a chunk while below the high-water mark),
// numbering every byte so that order and content can be checked on the way out.
void fill(ByteQueue& q, size_t& produced, size_t high_water = kHighWater) {
    while (q.size() < high_water) {
        auto space = q.prepare(kChunk);
        const size_t filled = kChunk - 7;  // recv rarely fills the whole chunk
        for (size_t i = 0; i < filled; ++i)
            space[i] = static_cast<std::byte>((produced + i) % 251);
        q.commit(filled);
        produced += filled;
    }
}

}  // namespace

TEST_CASE("a reader that never lets the queue run empty keeps its storage bounded") {
    ByteQueue q;
    size_t produced = 0;
    size_t consumed = 0;
    size_t max_capacity = 0;
    // 1 GiB through the queue, read in small bites so it never empties.
    while (consumed < (size_t{1} << 30)) {
        fill(q, produced);
        max_capacity = std::max(max_capacity, q.capacity());
        const size_t bite = std::min<size_t>(q.size() - 1, 40000);
        const auto front = q.front();
        for (size_t i = 0; i < bite; i += 997)
            REQUIRE(front[i] == static_cast<std::byte>((consumed + i) % 251));
        q.consume(bite);
        consumed += bite;
    }
    // At most L = high water + one chunk is held before a prepare(): 2 * L + chunk.
    CHECK(max_capacity <= 2 * (kHighWater + kChunk) + kChunk);
    CHECK(q.size() == produced - consumed);
}

TEST_CASE("a large queue's storage grows in few steps, not a chunk at a time") {
    // limits.session_buffer_bytes at 16 MiB: growing to exactly what each prepare() needed
    // reallocated, and copied everything queued, 256 times on the way up.
    constexpr size_t kLarge = 16 * 1024 * 1024;
    ByteQueue q;
    size_t produced = 0;
    size_t consumed = 0;
    size_t reallocations = 0;
    size_t max_capacity = 0;
    while (consumed < 4 * kLarge) {
        const size_t before = q.capacity();
        fill(q, produced, kLarge);
        reallocations += q.capacity() != before ? 1 : 0;
        max_capacity = std::max(max_capacity, q.capacity());
        const size_t bite = std::min<size_t>(q.size() - 1, 40000);
        q.consume(bite);
        consumed += bite;
    }
    CHECK(reallocations < 40);
    CHECK(max_capacity <= 2 * (kLarge + kChunk) + kChunk);
}

TEST_CASE("append and prepare keep the order across compaction") {
    ByteQueue q;
    std::vector<std::byte> expect;
    for (int round = 0; round < 1000; ++round) {
        std::vector<std::byte> piece(static_cast<size_t>(round % 37) + 1,
                                     static_cast<std::byte>(round));
        q.append(piece);
        expect.insert(expect.end(), piece.begin(), piece.end());
        auto space = q.prepare(16);
        space[0] = static_cast<std::byte>(round + 1);
        q.commit(1);
        expect.push_back(static_cast<std::byte>(round + 1));
        const size_t bite = q.size() / 2;
        const auto front = q.front();
        REQUIRE(std::equal(front.begin(), front.end(), expect.begin()));
        q.consume(bite);
        expect.erase(expect.begin(), expect.begin() + static_cast<ptrdiff_t>(bite));
    }
    q.consume(q.size());
    CHECK(q.empty());
    CHECK(q.size() == 0);
}
