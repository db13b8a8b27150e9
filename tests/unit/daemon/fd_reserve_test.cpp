// FdReserve out of descriptors, with another thread of the process taking the slot a spare
// frees (as the metrics endpoint's accept or a worker's upstream connect can in l5pgd).
// The process's descriptor limit is lowered for the test and restored afterwards.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "daemon/fd_reserve.hpp"

using l5pg::daemon::FdReserve;
using l5pg::daemon::UniqueFd;

namespace {

constexpr int kWaiting = 8;  // connections in the listen queue

// A listening Unix socket in the abstract namespace and kWaiting connections queued on it.
struct Queue {
    UniqueFd listener;
    std::vector<UniqueFd> clients;

    Queue() {
        listener.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        REQUIRE(listener.valid());
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        const std::string name = "l5pg-fd-reserve-test-" + std::to_string(::getpid());
        std::memcpy(addr.sun_path + 1, name.data(), name.size());
        const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
        REQUIRE(::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0);
        REQUIRE(::listen(listener.get(), kWaiting) == 0);
        for (int i = 0; i < kWaiting; ++i) {
            UniqueFd c(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
            REQUIRE(c.valid());
            REQUIRE(::connect(c.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0);
            clients.push_back(std::move(c));
        }
    }

    // How many clients were told something (the refusal) and then closed.
    int refused() const {
        int n = 0;
        for (const UniqueFd& c : clients) {
            char byte = 0;
            n += ::recv(c.get(), &byte, 1, MSG_DONTWAIT) == 1;
        }
        return n;
    }
};

int highest_open() {
    int highest = 0;
    for (int fd = 0; fd < 4096; ++fd) {
        if (::fcntl(fd, F_GETFD) != -1)
            highest = fd;
    }
    return highest;
}

// Lowers RLIMIT_NOFILE's soft limit to a little above what is open, fills the table with
// /dev/null, runs `while_full`, then undoes both. No Catch assertion (nor a thread's start)
// may run in between: UBSan's vptr checks need descriptors of their own and report
// nonsense without. False if the table could not be filled.
template <class Fn>
bool with_full_table(Fn&& while_full) {
    rlimit saved{};
    if (::getrlimit(RLIMIT_NOFILE, &saved) != 0)
        return false;
    rlimit lowered = saved;
    lowered.rlim_cur = static_cast<rlim_t>(highest_open() + 16);
    if (::setrlimit(RLIMIT_NOFILE, &lowered) != 0)
        return false;
    std::vector<UniqueFd> filler;
    filler.reserve(64);
    bool full = false;
    for (;;) {
        UniqueFd fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
        if (!fd.valid()) {
            full = errno == EMFILE;
            break;
        }
        filler.push_back(std::move(fd));
    }
    if (full)
        while_full();
    filler.clear();
    ::setrlimit(RLIMIT_NOFILE, &saved);
    return full;
}

const std::byte kRefusal[] = {std::byte{'E'}};

}  // namespace

TEST_CASE("fd reserve: refuses what waits when the table is full", "[daemon][fd]") {
    Queue queue;
    FdReserve reserve;
    REQUIRE(reserve.spares() == FdReserve::kSpares);
    size_t refused = 0;
    REQUIRE(with_full_table(
        [&] { refused = reserve.refuse_waiting(queue.listener.get(), kRefusal, 64); }));
    CHECK(refused == kWaiting);
    CHECK(queue.refused() == kWaiting);
    CHECK(reserve.spares() == FdReserve::kSpares);  // all taken back
}

TEST_CASE("fd reserve: a slot taken by another thread does not stop the refusals", "[daemon][fd]") {
    // The thief opens descriptors in a loop until it holds one: on two CPUs it usually takes
    // the first slot a spare frees, before accept() can. Repeated, since it may also lose.
    for (int round = 0; round < 20; ++round) {
        Queue queue;
        FdReserve reserve;
        std::atomic<bool> go{false};
        std::atomic<bool> done{false};
        UniqueFd stolen;
        std::thread thief([&] {
            while (!go.load())
                std::this_thread::yield();
            while (!done.load() && !stolen.valid())
                stolen.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
        });
        size_t refused = 0;
        size_t spares_left = 0;
        bool refilled_while_stolen = false;
        const bool full = with_full_table([&] {
            go.store(true);
            refused = reserve.refuse_waiting(queue.listener.get(), kRefusal, 64);
            done.store(true);
            thief.join();
            spares_left = reserve.spares();
            refilled_while_stolen = reserve.refill();
        });
        if (!full) {
            go.store(true);
            done.store(true);
            thief.join();
        }
        REQUIRE(full);
        INFO("round " << round << ", the thief " << (stolen.valid() ? "took a slot" : "did not"));
        CHECK(refused == kWaiting);
        CHECK(queue.refused() == kWaiting);
        // A stolen slot comes back to the reserve once its holder closes it.
        CHECK(spares_left == FdReserve::kSpares - (stolen.valid() ? 1 : 0));
        CHECK(refilled_while_stolen == !stolen.valid());
        stolen.reset();
        CHECK(reserve.refill());
        CHECK(reserve.spares() == FdReserve::kSpares);
    }
}
