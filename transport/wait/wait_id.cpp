#include "transport/wait/wait_id.hpp"

#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

namespace l5pg::wait {
namespace {

// The next name. Counted from 1 until seed_wait_ids() draws a random start.
std::atomic<uint64_t> g_next{1};

// getrandom() without blocking; should the kernel's pool not be ready (early boot), the
// clock and the pid still make the start differ between processes.
uint64_t random_start() noexcept {
    uint64_t start = 0;
    if (::getrandom(&start, sizeof start, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof start)) {
        timespec ts{};
        ::clock_gettime(CLOCK_MONOTONIC, &ts);
        start = (static_cast<uint64_t>(ts.tv_nsec) << 32) ^ static_cast<uint64_t>(ts.tv_sec) ^
                (static_cast<uint64_t>(::getpid()) << 16);
    }
    return start;
}

}  // namespace

uint64_t next_wait_id() noexcept {
    const uint64_t id = g_next.fetch_add(1, std::memory_order_relaxed);
    return id != kUnnamedWait ? id : g_next.fetch_add(1, std::memory_order_relaxed);
}

void seed_wait_ids() noexcept {
    g_next.store(random_start(), std::memory_order_relaxed);
}

}  // namespace l5pg::wait
