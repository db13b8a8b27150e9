// limits.max_sessions' places (daemon/session_cap.hpp): taken up to the cap, given back by
// the holder however it ends, the cap read per call, and exact under threads racing for them.
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "daemon/session_cap.hpp"

using l5pg::daemon::SessionCap;

TEST_CASE("SessionCap: places up to the cap, given back when their holders end") {
    SessionCap cap;
    SessionCap::Place a = cap.try_take(2);
    SessionCap::Place b = cap.try_take(2);
    CHECK(a.held());
    CHECK(b.held());
    CHECK_FALSE(cap.try_take(2).held());
    CHECK(cap.try_take(3).held() == true);  // a larger cap (a reload): one more, given back
    CHECK(cap.taken() == 2);
    {
        SessionCap::Place moved = std::move(a);
        CHECK_FALSE(a.held());
        CHECK(cap.taken() == 2);
    }
    CHECK(cap.taken() == 1);
    a = cap.try_take(2);
    CHECK(a.held());
    a = SessionCap::Place();  // assigning over a held place gives it back
    b.release();
    b.release();  // once
    CHECK(cap.taken() == 0);
}

TEST_CASE("SessionCap: threads racing for the last places take exactly the cap") {
    SessionCap cap;
    constexpr size_t kMax = 100;
    std::vector<std::vector<SessionCap::Place>> held(4);
    std::vector<std::thread> threads;
    for (auto& mine : held)
        threads.emplace_back([&cap, &mine] {
            for (int i = 0; i < 1000; ++i)
                if (SessionCap::Place p = cap.try_take(kMax); p.held())
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
