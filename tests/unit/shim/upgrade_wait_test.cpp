// The upgrade handshakes' waits for l5pgd (clientlib/upgrade_wait.cpp) in a program with an
// interval timer (a profiler's SIGPROF, an application's SIGALRM): EINTR must not eat the
// budget. Each wait used to halve what was left, so that 100 signals a second cut the 5 s
// budget to milliseconds and failed a connection whose l5pgd answered a little late.
#include <catch2/catch.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "clientlib/real_calls.hpp"
#include "clientlib/settings.hpp"
#include "clientlib/upgrade_common.hpp"
#include "transport/unique_fd.hpp"

namespace {

using l5pg::UniqueFd;
using namespace std::chrono_literals;

std::atomic<int> g_ticks{0};  // lock-free: safe in a signal handler
void on_tick(int) {
    g_ticks.fetch_add(1, std::memory_order_relaxed);
}

// A connected pair: the shim's socket and l5pgd's.
struct SocketPair {
    SocketPair() {
        l5pg::shim::resolve_real_calls();
        int sv[2];
        REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        client = UniqueFd(sv[0]);
        daemon = UniqueFd(sv[1]);
    }
    UniqueFd client, daemon;
};

// SIGALRM every 2 ms, installed without SA_RESTART (poll() fails with EINTR), for its scope.
class IntervalTimer {
  public:
    IntervalTimer() {
        struct sigaction sa {};
        sa.sa_handler = on_tick;
        sigemptyset(&sa.sa_mask);
        REQUIRE(::sigaction(SIGALRM, &sa, &old_) == 0);
        const itimerval every{{0, 2000}, {0, 2000}};
        REQUIRE(::setitimer(ITIMER_REAL, &every, nullptr) == 0);
    }
    ~IntervalTimer() {
        const itimerval off{};
        (void)::setitimer(ITIMER_REAL, &off, nullptr);
        (void)::sigaction(SIGALRM, &old_, nullptr);
    }
    IntervalTimer(const IntervalTimer&) = delete;
    IntervalTimer& operator=(const IntervalTimer&) = delete;

  private:
    struct sigaction old_ {};
};

// L5PG_UPGRADE_TIMEOUT_MS = `ms` for one test case; the defaults again after it.
class UpgradeTimeout {
  public:
    explicit UpgradeTimeout(const char* ms) {
        ::setenv("L5PG_UPGRADE_TIMEOUT_MS", ms, 1);
        l5pg::shim::load_settings();
        ::unsetenv("L5PG_UPGRADE_TIMEOUT_MS");
    }
    ~UpgradeTimeout() { l5pg::shim::load_settings(); }
    UpgradeTimeout(const UpgradeTimeout&) = delete;
    UpgradeTimeout& operator=(const UpgradeTimeout&) = delete;
};

}  // namespace

TEST_CASE("upgrade wait: an interval timer's signals do not shorten the wait for the answer",
          "[shim]") {
    l5pg::shim::load_settings();  // L5PG_UPGRADE_TIMEOUT_MS: 5 s
    const SocketPair pair;
    // The answer comes 300 ms late, from a thread that blocks SIGALRM (the wait gets them).
    sigset_t alarm;
    sigemptyset(&alarm);
    sigaddset(&alarm, SIGALRM);
    REQUIRE(::pthread_sigmask(SIG_BLOCK, &alarm, nullptr) == 0);
    std::thread answer([&] {
        std::this_thread::sleep_for(300ms);
        const char accepted = 'L';
        (void)::write(pair.daemon.get(), &accepted, 1);
    });
    REQUIRE(::pthread_sigmask(SIG_UNBLOCK, &alarm, nullptr) == 0);
    char got = 0;
    {
        IntervalTimer timer;
        got = l5pg::shim::await_answer(pair.client.get());
    }
    answer.join();
    CHECK(got == 'L');
    CHECK(g_ticks.load() > 20);  // the wait was interrupted, many times
}

TEST_CASE("upgrade wait: the deadline still ends a wait that gets no answer", "[shim]") {
    const UpgradeTimeout budget("50");
    const SocketPair pair;
    const auto start = std::chrono::steady_clock::now();
    char got = 'x';
    int err = 0;
    {
        IntervalTimer timer;
        got = l5pg::shim::await_answer(pair.client.get());
        err = errno;
    }
    CHECK(got == 0);
    CHECK(err == ETIMEDOUT);
    CHECK(std::chrono::steady_clock::now() - start >= 50ms);
}

TEST_CASE("upgrade wait: the steps of one upgrade share one deadline", "[shim]") {
    const UpgradeTimeout budget("2000");
    const SocketPair pair;
    const auto start = std::chrono::steady_clock::now();
    char first = 0;
    char second = 'x';
    int err = 0;
    {
        const l5pg::shim::UpgradeClock clock;
        // The first answer comes after 1.5 s of the 2 s; the second never.
        std::thread answer([&] {
            std::this_thread::sleep_for(1500ms);
            const char accepted = 'L';
            (void)::write(pair.daemon.get(), &accepted, 1);
        });
        first = l5pg::shim::await_answer(pair.client.get());
        answer.join();
        second = l5pg::shim::await_answer(pair.client.get());
        err = errno;
    }
    const auto took = std::chrono::steady_clock::now() - start;
    CHECK(first == 'L');
    CHECK(second == 0);
    CHECK(err == ETIMEDOUT);
    // 2 s in all, where each step had its own 2 s before (3.5 s).
    CHECK(took >= 2000ms);
    CHECK(took < 3000ms);
}

TEST_CASE("upgrade wait: a fallback after a spent attempt gets a budget of its own", "[shim]") {
    const UpgradeTimeout budget("1000");
    const SocketPair pair;
    char attempt = 'x';
    char fallback = 0;
    {
        const l5pg::shim::UpgradeClock clock;
        attempt = l5pg::shim::await_answer(pair.client.get());  // no answer: the budget goes
        l5pg::shim::UpgradeClock::begin_fallback();
        std::thread answer([&] {
            std::this_thread::sleep_for(500ms);
            const char declined = 'N';
            (void)::write(pair.daemon.get(), &declined, 1);
        });
        fallback = l5pg::shim::await_answer(pair.client.get());
        answer.join();
    }
    CHECK(attempt == 0);
    CHECK(fallback == 'N');
}
