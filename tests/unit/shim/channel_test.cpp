// The shim's byte-stream semantics (clientlib/channel.cpp) through a loopback end
// (loopback_end.hpp): partial transfers, EAGAIN, blocking with the doorbell, EOF, EPIPE
// and SIGPIPE, broken channels, MSG_PEEK and MSG_WAITALL, poll() readiness, references.
// The application's socket is one end of a socketpair; the test plays l5pgd on the other.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <string>
#include <thread>

#include "clientlib/channel.hpp"
#include "clientlib/l5pg.h"
#include "clientlib/real_calls.hpp"
#include "tests/unit/shim/loopback_end.hpp"
#include "transport/wait/wait_id.hpp"

using namespace std::chrono_literals;
using l5pg::shim::Channel;
using l5pg::test::Faults;
using l5pg::test::LoopbackEnd;
using l5pg::transport::Want;

namespace {

// One upgraded connection over a loopback end: `app` is the application's socket,
// `peer` l5pgd's.
struct Connection {
    explicit Connection(size_t capacity = 1 << 16, bool nonblocking = false) : end(capacity) {
        l5pg::shim::resolve_real_calls();
        int sv[2];
        REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        app = sv[0];
        peer = sv[1];
        ch = l5pg::shim::channel_acquire_end(end, L5PG_TRANSPORT_SHM, nonblocking);
        REQUIRE(ch != nullptr);
    }
    ~Connection() {
        if (ch != nullptr)
            l5pg::shim::channel_release(*ch);
        ::close(app);
        if (peer >= 0)
            ::close(peer);
    }
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;

    ssize_t send(std::string_view bytes, int flags = MSG_NOSIGNAL) {
        iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
        return l5pg::shim::channel_send(*ch, app, &iov, 1, flags, (flags & MSG_NOSIGNAL) != 0);
    }
    // recv into a buffer of `size`; the result's length is what recv returned (if > 0).
    std::string recv(size_t size, int flags = 0, ssize_t* rc = nullptr) {
        std::string buf(size, '\0');
        iovec iov{buf.data(), buf.size()};
        const ssize_t n = l5pg::shim::channel_recv(*ch, app, &iov, 1, flags);
        if (rc != nullptr)
            *rc = n;
        buf.resize(n > 0 ? static_cast<size_t>(n) : 0);
        return buf;
    }
    // Waits (bounded) until the application's side armed its flag for `want`.
    bool wait_armed(Want want) {
        for (int i = 0; i < 5000; ++i) {
            if (end.armed(want))
                return true;
            std::this_thread::sleep_for(1ms);
        }
        return false;
    }

    LoopbackEnd end;
    int app = -1;
    int peer = -1;
    Channel* ch = nullptr;
};

// SIGPIPE blocked on this thread while it lives, so that a raised one stays pending.
struct PendingSigpipe {
    PendingSigpipe() {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGPIPE);
        pthread_sigmask(SIG_BLOCK, &set, &old);
    }
    ~PendingSigpipe() {
        (void)raised();
        pthread_sigmask(SIG_SETMASK, &old, nullptr);
    }
    // Whether one was raised (and consumes it).
    bool raised() {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGPIPE);
        timespec zero{0, 0};
        return sigtimedwait(&set, nullptr, &zero) == SIGPIPE;
    }
    sigset_t old;
};

}  // namespace

TEST_CASE("channel send: short writes still deliver every byte of every iovec piece", "[shim]") {
    Connection c;
    c.end.set_faults(Faults{.max_write = 3});
    std::string a = "hello, ", b = "world";
    iovec iov[2] = {{a.data(), a.size()}, {b.data(), b.size()}};
    CHECK(l5pg::shim::channel_send(*c.ch, c.app, iov, 2, 0, true) == 12);
    CHECK(c.end.take() == "hello, world");
}

TEST_CASE("channel send: a non-blocking send on a full end is EAGAIN, a partial one counts",
          "[shim]") {
    Connection c(/*capacity=*/4, /*nonblocking=*/true);
    CHECK(c.send("abcdef") == 4);  // what fitted
    errno = 0;
    CHECK(c.send("gh") == -1);
    CHECK(errno == EAGAIN);
    CHECK(c.end.take() == "abcd");
    CHECK(c.send("gh") == 2);
}

TEST_CASE("channel send: injected WouldBlock is EAGAIN with MSG_DONTWAIT on a blocking socket",
          "[shim]") {
    Connection c;
    c.end.set_faults(Faults{.would_block_writes = 1});
    errno = 0;
    CHECK(c.send("x", MSG_DONTWAIT | MSG_NOSIGNAL) == -1);
    CHECK(errno == EAGAIN);
    CHECK(c.send("x", MSG_DONTWAIT | MSG_NOSIGNAL) == 1);
}

TEST_CASE("channel send: a blocking send waits for room, woken by the doorbell", "[shim]") {
    Connection c(/*capacity=*/4);
    bool armed = false;
    std::string taken;
    std::thread l5pgd([&] {  // no Catch assertions off the main thread: it is not thread-safe
        armed = c.wait_armed(Want::Write);
        taken = c.end.take(c.peer);  // room, and the doorbell for the armed writer
    });
    CHECK(c.send("abcdefgh") == 8);
    l5pgd.join();
    CHECK(armed);
    CHECK(taken == "abcd");
    CHECK(c.end.take() == "efgh");
}

// As the kernel applies SO_SNDTIMEO and SO_RCVTIMEO to one blocking call.
TEST_CASE("channel send and recv: a blocking socket's timeout ends the wait with EAGAIN",
          "[shim]") {
    Connection c(/*capacity=*/4);
    const timeval timeout{0, 50'000};
    REQUIRE(::setsockopt(c.app, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout) == 0);
    REQUIRE(::setsockopt(c.app, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout) == 0);
    CHECK(c.send("abcdefgh") == 4);  // what fitted before the timeout
    errno = 0;
    CHECK(c.send("ij") == -1);  // nothing fits
    CHECK(errno == EAGAIN);
    ssize_t rc = 0;
    errno = 0;
    CHECK(c.recv(16, 0, &rc).empty());
    CHECK(rc == -1);
    CHECK(errno == EAGAIN);
    CHECK(c.end.take() == "abcd");
}

TEST_CASE("channel send: after l5pgd closed, EPIPE and SIGPIPE unless MSG_NOSIGNAL", "[shim]") {
    Connection c;
    c.end.close_from_peer();
    PendingSigpipe sigpipe;
    errno = 0;
    CHECK(c.send("x", MSG_NOSIGNAL) == -1);
    CHECK(errno == EPIPE);
    CHECK_FALSE(sigpipe.raised());
    CHECK(c.send("x", 0) == -1);
    CHECK(errno == EPIPE);
    CHECK(sigpipe.raised());
}

TEST_CASE("channel send: a broken channel is ECONNRESET without SIGPIPE", "[shim]") {
    Connection c;
    c.end.tear("torn record");
    PendingSigpipe sigpipe;
    errno = 0;
    CHECK(c.send("x", 0) == -1);
    CHECK(errno == ECONNRESET);
    CHECK_FALSE(sigpipe.raised());
}

TEST_CASE("channel send: zero bytes succeed unless the connection is gone", "[shim]") {
    Connection c;
    CHECK(c.send("") == 0);
    c.end.close_from_peer();
    errno = 0;
    CHECK(c.send("") == -1);
    CHECK(errno == EPIPE);
}

TEST_CASE("channel recv: returns what is there, a short read at a time, without MSG_WAITALL",
          "[shim]") {
    Connection c;
    c.end.set_faults(Faults{.max_read = 2});
    c.end.deliver("abcde");
    CHECK(c.recv(16) == "abcde");  // short reads are joined while data lasts
    c.end.deliver("xy");
    CHECK(c.recv(1) == "x");
    CHECK(c.recv(16) == "y");
}

TEST_CASE("channel recv: non-blocking on an empty end is EAGAIN", "[shim]") {
    Connection c(1 << 16, /*nonblocking=*/true);
    ssize_t rc = 0;
    errno = 0;
    CHECK(c.recv(16, 0, &rc).empty());
    CHECK(rc == -1);
    CHECK(errno == EAGAIN);
    c.end.set_faults(Faults{.would_block_reads = 1});
    c.end.deliver("a");
    CHECK(c.recv(16, 0, &rc).empty());  // the injected WouldBlock
    CHECK(rc == -1);
    CHECK(c.recv(16) == "a");
}

TEST_CASE("channel recv: a blocking recv arms, sleeps and wakes on the doorbell", "[shim]") {
    Connection c;
    bool armed = false;
    std::thread l5pgd([&] {
        armed = c.wait_armed(Want::Read);
        c.end.deliver("answer", c.peer);
    });
    CHECK(c.recv(64) == "answer");
    l5pgd.join();
    CHECK(armed);
}

TEST_CASE("channel recv: MSG_WAITALL blocks until the whole buffer is filled", "[shim]") {
    Connection c;
    c.end.deliver("abc");
    bool armed = false;
    std::thread l5pgd([&] {
        armed = c.wait_armed(Want::Read);
        c.end.deliver("def", c.peer);
    });
    CHECK(c.recv(6, MSG_WAITALL) == "abcdef");
    l5pgd.join();
    CHECK(armed);
}

TEST_CASE("channel recv: EOF only after everything l5pgd published was read", "[shim]") {
    Connection c;
    c.end.deliver("last words");
    c.end.close_from_peer();
    CHECK(c.recv(4) == "last");
    CHECK(c.recv(64) == " words");
    ssize_t rc = -1;
    CHECK(c.recv(64, 0, &rc).empty());
    CHECK(rc == 0);
}

TEST_CASE("channel recv: the socket's EOF wakes a blocked reader with EOF", "[shim]") {
    Connection c;
    bool armed = false;
    std::thread l5pgd([&] {
        armed = c.wait_armed(Want::Read);
        ::close(c.peer);  // l5pgd died without saying so
        c.peer = -1;
    });
    ssize_t rc = -1;
    CHECK(c.recv(64, 0, &rc).empty());
    CHECK(rc == 0);
    l5pgd.join();
    CHECK(armed);
}

TEST_CASE("channel recv: a torn record returns the bytes before it, then ECONNRESET", "[shim]") {
    Connection c;
    c.end.deliver("good");
    CHECK(c.recv(2) == "go");
    c.end.tear("torn record in the server->client ring");
    ssize_t rc = 0;
    errno = 0;
    CHECK(c.recv(64, 0, &rc).empty());
    CHECK(rc == -1);
    CHECK(errno == ECONNRESET);
}

TEST_CASE("channel recv: MSG_PEEK copies without consuming", "[shim]") {
    Connection c;
    c.end.deliver("peekaboo");
    CHECK(c.recv(4, MSG_PEEK) == "peek");
    CHECK(c.recv(64) == "peekaboo");
}

TEST_CASE("channel recv: MSG_PEEK fills every iovec, as a socket's does", "[shim]") {
    Connection c;
    c.end.deliver("peekaboo");
    std::string a(3, '\0'), b(8, '\0');
    iovec iov[2] = {{a.data(), a.size()}, {b.data(), b.size()}};
    CHECK(l5pg::shim::channel_recv(*c.ch, c.app, iov, 2, MSG_PEEK) == 8);
    CHECK(a == "pee");
    CHECK(b.substr(0, 5) == "kaboo");
    CHECK(c.recv(64) == "peekaboo");
}

TEST_CASE("channel poll support: revents follow the end's state", "[shim]") {
    Connection c(/*capacity=*/2);
    using l5pg::shim::channel_revents;
    CHECK(channel_revents(*c.ch, POLLIN | POLLOUT) == POLLOUT);
    c.end.deliver("a");
    CHECK(c.send("bc") == 2);  // full now
    CHECK(channel_revents(*c.ch, POLLIN | POLLOUT) == POLLIN);
    c.end.close_from_peer();
    CHECK(channel_revents(*c.ch, POLLIN) == POLLIN);  // data first, no POLLHUP yet
    CHECK(c.recv(8) == "a");
    CHECK((channel_revents(*c.ch, POLLIN) & (POLLIN | POLLHUP)) == (POLLIN | POLLHUP));
    c.end.tear("corrupt position");
    CHECK((channel_revents(*c.ch, POLLIN) & POLLERR) == POLLERR);
}

TEST_CASE("channel poll support: arm and disarm set and take back the end's flags", "[shim]") {
    Connection c;
    l5pg::shim::CountedWants counted = 0;
    l5pg::shim::channel_arm(*c.ch, POLLIN | POLLOUT, l5pg::wait::kUnnamedWait, counted);
    CHECK(c.end.armed(Want::Read));
    CHECK(c.end.armed(Want::Write));
    l5pg::shim::channel_disarm(*c.ch, POLLIN, counted);
    CHECK_FALSE(c.end.armed(Want::Read));
    CHECK(c.end.armed(Want::Write));
    l5pg::shim::stop_waiting(*c.ch, counted);
}

TEST_CASE("channel references: only the last release closes the end, once", "[shim]") {
    Connection c;
    REQUIRE(l5pg::shim::channel_try_add_ref(*c.ch));  // a dup() of the socket
    l5pg::shim::channel_release(*c.ch);
    CHECK(c.end.closes_by_application() == 0);
    l5pg::shim::channel_release(*c.ch);
    CHECK(c.end.closes_by_application() == 1);
    c.ch = nullptr;  // released: the slot may be reused
}

TEST_CASE("channel references: none is taken of a channel whose last one went", "[shim]") {
    Connection c;
    l5pg::shim::Channel& ch = *c.ch;
    l5pg::shim::channel_release(ch);
    c.ch = nullptr;
    // A call that looked the fd up just before the close: it must not revive the slot.
    CHECK_FALSE(l5pg::shim::channel_try_add_ref(ch));
    CHECK(c.end.closes_by_application() == 1);
}

// As recv(2) of zero bytes on a Unix stream socket (a socketpair says the same).
TEST_CASE("channel recv: zero bytes are 0 once something is there, else as an empty recv",
          "[shim]") {
    Connection c;
    ssize_t rc = -1;
    errno = 0;
    CHECK(c.recv(0, MSG_DONTWAIT, &rc).empty());
    CHECK(rc == -1);
    CHECK(errno == EAGAIN);

    c.end.deliver("ab");
    CHECK(c.recv(0, MSG_DONTWAIT, &rc).empty());
    CHECK(rc == 0);
    CHECK(c.recv(16) == "ab");  // nothing was taken

    c.end.close_from_peer();
    CHECK(c.recv(0, MSG_DONTWAIT, &rc).empty());
    CHECK(rc == 0);
}

TEST_CASE("channel recv: zero bytes on a blocking empty end wait for data", "[shim]") {
    Connection c;
    std::atomic<bool> delivered{false};
    std::thread peer([&] {
        std::this_thread::sleep_for(50ms);
        delivered.store(true);
        c.end.deliver("z", c.peer);  // rings if the reader armed
    });
    ssize_t rc = -1;
    CHECK(c.recv(0, 0, &rc).empty());
    CHECK(rc == 0);
    CHECK(delivered.load());
    peer.join();
    CHECK(c.recv(16) == "z");
}
