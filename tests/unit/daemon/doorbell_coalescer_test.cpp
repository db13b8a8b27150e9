#include <catch2/catch.hpp>

#include "daemon/doorbell_coalescer.hpp"

using l5pg::daemon::DoorbellCoalescer;
using l5pg::wait::kUnnamedWait;

TEST_CASE("DoorbellCoalescer: one doorbell per named wait", "[daemon][doorbell]") {
    DoorbellCoalescer c;
    SECTION("unnamed waits always ring") {
        CHECK(c.must_ring(100, kUnnamedWait));
        CHECK(c.must_ring(100, kUnnamedWait));
    }
    SECTION("a named wait rings once") {
        CHECK(c.must_ring(100, 42));
        CHECK_FALSE(c.must_ring(100, 42));
        CHECK_FALSE(c.must_ring(100, 42));
        CHECK(c.must_ring(100, 43));  // the thread's next wait
    }
    SECTION("the same name from another client process rings") {
        CHECK(c.must_ring(100, 42));
        CHECK(c.must_ring(200, 42));
        CHECK_FALSE(c.must_ring(200, 42));
    }
    SECTION("several threads' waits interleaved") {
        for (uint64_t w = 1; w <= 8; ++w)
            CHECK(c.must_ring(100, w));
        for (uint64_t w = 1; w <= 8; ++w)
            CHECK_FALSE(c.must_ring(100, w));
    }
    SECTION("an old wait forgotten rings again: a spare doorbell, never a lost one") {
        CHECK(c.must_ring(100, 1));
        for (uint64_t w = 2; w <= 9; ++w)
            CHECK(c.must_ring(100, w));
        CHECK(c.must_ring(100, 1));
    }
}
