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

// Another thread that takes the first descriptor slot it can get, between steal() and
// stop(). Its start and its end (virtual calls that UBSan checks, with descriptors of its own)
// happen outside that window, while the table has room.
class Thief {
  public:
    Thief() : thread_([this] { run(); }) {
        while (!running_.load())
            std::this_thread::yield();
    }
    ~Thief() {
        (void)stop();
        released_.store(true);
        thread_.join();
    }
    Thief(const Thief&) = delete;
    Thief& operator=(const Thief&) = delete;

    void steal() { go_.store(true); }
    // Ends the loop; true if the thief holds a descriptor.
    bool stop() {
        done_.store(true);
        go_.store(true);
        while (!finished_.load())
            std::this_thread::yield();
        return stolen_.valid();
    }
    void give_back() { stolen_.reset(); }

  private:
    void run() {
        running_.store(true);
        while (!go_.load())
            std::this_thread::yield();
        while (!done_.load() && !stolen_.valid())
            stolen_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
        finished_.store(true);
        while (!released_.load())
            std::this_thread::yield();
    }

    std::atomic<bool> running_{false};
    std::atomic<bool> go_{false};
    std::atomic<bool> done_{false};
    std::atomic<bool> finished_{false};
    std::atomic<bool> released_{false};
    UniqueFd stolen_;
    std::thread thread_;  // last: starts once the members above exist
};

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
        Thief thief;
        size_t refused = 0;
        size_t spares_left = 0;
        bool stolen = false;
        bool refilled_while_stolen = false;
        REQUIRE(with_full_table([&] {
            thief.steal();
            refused = reserve.refuse_waiting(queue.listener.get(), kRefusal, 64);
            stolen = thief.stop();
            spares_left = reserve.spares();
            refilled_while_stolen = reserve.refill();
        }));
        INFO("round " << round << ", the thief " << (stolen ? "took a slot" : "did not"));
        CHECK(refused == kWaiting);
        CHECK(queue.refused() == kWaiting);
        // A stolen slot comes back to the reserve once its holder closes it.
        CHECK(spares_left == FdReserve::kSpares - (stolen ? 1 : 0));
        CHECK(refilled_while_stolen == !stolen);
        thief.give_back();
        CHECK(reserve.refill());
        CHECK(reserve.spares() == FdReserve::kSpares);
    }
}
