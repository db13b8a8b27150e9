// Shares of a Capacity (daemon/capacity.hpp; limits.max_sessions' places, RDMA memory): taken
// up to the cap, given back by the holder however it ends, the cap read per call, and exact
// under threads racing for them.
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "daemon/capacity.hpp"

using l5pg::daemon::Capacity;

TEST_CASE("Capacity: places of one up to the cap, given back when their holders end") {
    Capacity cap;
    Capacity::Share a = cap.try_take(1, 2);
    Capacity::Share b = cap.try_take(1, 2);
    CHECK(a.held());
    CHECK(b.held());
    CHECK_FALSE(cap.try_take(1, 2).held());
    CHECK(cap.try_take(1, 3).held() == true);  // a larger cap (a reload): one more, given back
    CHECK(cap.taken() == 2);
    {
        Capacity::Share moved = std::move(a);
        CHECK_FALSE(a.held());
        CHECK(cap.taken() == 2);
    }
    CHECK(cap.taken() == 1);
    a = cap.try_take(1, 2);
    CHECK(a.held());
    a = Capacity::Share();  // assigning over a held place gives it back
    b.release();
    b.release();  // once
    CHECK(cap.taken() == 0);
}

TEST_CASE("Capacity: threads racing for the last places take exactly the cap") {
    Capacity cap;
    constexpr size_t kMax = 100;
    std::vector<std::vector<Capacity::Share>> held(4);
    std::vector<std::thread> threads;
    for (auto& mine : held)
        threads.emplace_back([&cap, &mine] {
            for (int i = 0; i < 1000; ++i)
                if (Capacity::Share p = cap.try_take(1, kMax); p.held())
                    mine.push_back(std::move(p));
        });
    for (auto& t : threads)
        t.join();
    size_t total = 0;
    for (const auto& mine : held)
        total += mine.size();
    CHECK(total == kMax);
    CHECK(cap.taken() == kMax);
    held.clear();
    CHECK(cap.taken() == 0);
}

TEST_CASE("Capacity: shares of any size, never past the cap, even near its type's end") {
    Capacity bytes;
    Capacity::Share a = bytes.try_take(600, 1000);
    CHECK(a.held());
    CHECK_FALSE(bytes.try_take(401, 1000).held());
    Capacity::Share b = bytes.try_take(400, 1000);
    CHECK(b.held());
    CHECK(bytes.taken() == 1000);
    a.release();
    CHECK(bytes.taken() == 400);
    CHECK_FALSE(bytes.try_take(UINT64_MAX, UINT64_MAX).held());  // would wrap past the cap
    CHECK_FALSE(bytes.try_take(2000, 1000).held());
    b = Capacity::Share();
    CHECK(bytes.taken() == 0);
}

TEST_CASE("Capacity: a share resized in one step, growing only within the cap") {
    Capacity bytes;
    Capacity::Share a = bytes.try_take(300, 1000);
    Capacity::Share b = bytes.try_take(600, 1000);
    CHECK(a.resize(400, 1000));  // 400 + 600
    CHECK(bytes.taken() == 1000);
    CHECK_FALSE(a.resize(401, 1000));
    CHECK(bytes.taken() == 1000);  // unchanged
    CHECK(a.resize(100, 1000));    // smaller always fits
    CHECK(bytes.taken() == 700);
    CHECK_FALSE(Capacity::Share().resize(1, 1000));  // nothing held
    a.release();
    CHECK(bytes.taken() == 600);  // gives back what it holds now
    b.release();
    CHECK(bytes.taken() == 0);
}
