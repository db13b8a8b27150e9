// Two processes, one 4 KiB ring, tiny spin budgets: both sides block all the time, so
// every wake-up goes through the full Dekker + doorbell protocol. Both wait with the
// wait that ships (transport/wait/block.hpp); only how they sleep is the test's own: a
// lost wake-up shows up as a poll() timeout and fails the test instead of hanging it.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "test_util.hpp"
#include "transport/shm/ring.hpp"
#include "transport/shm/segment.hpp"
#include "transport/wait/block.hpp"
#include "transport/wait/doorbell.hpp"

using namespace l5pg::shm;
using l5pg::wait::drain_doorbells;
using l5pg::wait::DrainResult;
using l5pg::wait::ring_doorbell;
using l5pg::wait::WaitPolicy;
using l5pg::wait::Woken;

namespace {

constexpr uint64_t kRecords = 10'000'000;
constexpr int kPollTimeoutMs = 10'000;
constexpr size_t kMaxRecord = 200;

// Child exit codes.
enum ChildExit : int {
    kChildOk = 0,
    kChildLostWakeup = 3,
    kChildPeerGone = 4,
    kChildCorrupt = 5,
    kChildPollError = 6,
};

struct SplitMix {
    uint64_t s;
    uint64_t next() noexcept {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
};

constexpr uint64_t kSizeSeed = 0x5eed5eed;

// Record `seq`: size from the shared PRNG stream, content from the sequence counter.
void fill_record(uint64_t seq, size_t n, std::byte* out) noexcept {
    const uint32_t x = static_cast<uint32_t>(seq * 2654435761u) ^ static_cast<uint32_t>(seq >> 29);
    for (size_t j = 0; j < n; ++j)
        out[j] = static_cast<std::byte>((x >> (8 * (j & 3))) + static_cast<uint32_t>(j));
}

struct Checksum {
    uint64_t h = 0xcbf29ce484222325ull;
    void add(const std::byte* p, size_t n) noexcept {
        for (size_t i = 0; i < n; ++i)
            h = (h ^ static_cast<uint8_t>(p[i])) * 0x100000001b3ull;
    }
};

// TINY budgets: spin 0..1 us, yield 0..5 us.
WaitPolicy tiny_budget(SplitMix& rng) {
    const uint64_t r = rng.next();
    return WaitPolicy{std::chrono::nanoseconds(r % 1001),
                      std::chrono::nanoseconds((r >> 20) % 5001)};
}

// The policy of one wait's rounds: half of the waits skip even the tiny spin (one look at
// the ring, then arm), to block as often as possible; no round after the first spins.
class StressPolicy {
  public:
    explicit StressPolicy(SplitMix& rng) noexcept
        : first_(rng.next() % 2 == 0 ? tiny_budget(rng) : WaitPolicy::none()) {}
    WaitPolicy next() noexcept { return std::exchange(first_, WaitPolicy::none()); }

  private:
    WaitPolicy first_;
};

void child_say(const char* msg) noexcept {
    const ssize_t ignored = ::write(2, msg, std::strlen(msg));
    (void)ignored;
}

// Shared with the parent through the (otherwise unused) s2c ring of the segment.
struct ChildStats {
    std::atomic<uint64_t> polls;
    std::atomic<uint64_t> doorbells;
};

// ------------------------------------------------------------------ writer (child)

// The writer's wait for ring space: the shipped wait; a lost wake-up or a vanished reader
// ends the child with its exit code.
struct WriterWaiter {
    RingWriter& ring;
    int sock;
    uint64_t& polls;
    StressPolicy rounds;

    bool ready() noexcept { return ring.free_bytes() > 0; }
    WaitPolicy policy() noexcept { return rounds.next(); }
    bool arm() noexcept {
        ring.arm();
        return true;
    }
    void disarm() noexcept { (void)ring.disarm(); }  // false: a doorbell is on its way
    Woken sleep() noexcept {
        pollfd pfd{sock, POLLIN, 0};
        const int r = ::poll(&pfd, 1, kPollTimeoutMs);
        if (r == 0) {
            child_say("writer: lost wake-up: no doorbell for 10 s while the ring is full\n");
            ::_exit(kChildLostWakeup);
        }
        if (r < 0) {
            if (errno == EINTR)
                return Woken::Again;
            ::_exit(kChildPollError);
        }
        ++polls;
        size_t count = 0;
        if (drain_doorbells(sock, count) != DrainResult::Drained) {
            child_say("writer: reader went away\n");
            ::_exit(kChildPeerGone);
        }
        return Woken::Again;
    }
};

[[noreturn]] void run_writer(Segment& seg, int sock) noexcept {
    RingWriter w(seg.header().c2s, seg.c2s_data(), seg.c2s_size());
    auto* stats = reinterpret_cast<ChildStats*>(seg.s2c_data());
    SplitMix sizes{kSizeSeed};
    SplitMix budget_rng{0xb0d6e7};
    Checksum sum;
    uint64_t polls = 0;
    uint64_t doorbells = 0;

    auto wake_reader = [&]() noexcept {
        if (w.reader_needs_wakeup()) {
            ++doorbells;
            if (!ring_doorbell(sock)) {
                child_say("writer: doorbell to a closed reader\n");
                ::_exit(kChildPeerGone);
            }
        }
    };
    auto wait_for_space = [&]() noexcept {
        WriterWaiter waiter{w, sock, polls, StressPolicy(budget_rng)};
        (void)l5pg::wait::block_until_ready(waiter);  // sleep() exits instead of stopping
    };
    auto send = [&](const std::byte* p, size_t n, bool use_reserve) noexcept {
        size_t off = 0;
        while (off < n) {
            RingStatus status = RingStatus::Ok;
            if (use_reserve) {
                std::span<std::byte> space;
                status = w.reserve(n - off, space);
                if (status == RingStatus::Ok) {
                    std::memcpy(space.data(), p + off, space.size());
                    w.commit(space.size());
                    off += space.size();
                    wake_reader();
                }
            } else {
                const size_t written = w.write({p + off, n - off}, status);
                off += written;
                if (written > 0)
                    wake_reader();
            }
            if (status == RingStatus::Corrupt) {
                child_say("writer: ring corrupt\n");
                ::_exit(kChildCorrupt);
            }
            if (off < n)
                wait_for_space();
        }
    };

    std::byte rec[kMaxRecord];
    for (uint64_t seq = 0; seq < kRecords; ++seq) {
        const size_t n = 1 + sizes.next() % kMaxRecord;
        fill_record(seq, n, rec);
        sum.add(rec, n);
        send(rec, n, (seq & 1) != 0);
    }
    send(reinterpret_cast<const std::byte*>(&sum.h), sizeof sum.h, false);
    stats->polls.store(polls);
    stats->doorbells.store(doorbells);
    seg.header().client_closed.store(1, std::memory_order_release);
    ::_exit(kChildOk);
}

// ------------------------------------------------------------------ reader (parent)

struct ChildGuard {
    pid_t pid = -1;
    ~ChildGuard() {
        if (pid > 0) {
            ::kill(pid, SIGKILL);
            int status = 0;
            ::waitpid(pid, &status, 0);
        }
    }
};

// The expected byte stream: every record, then the writer's 8-byte checksum.
class Expected {
  public:
    // Compares `n` received bytes; returns false with `error` set on a mismatch.
    bool check(const std::byte* p, size_t n, std::string& error) {
        while (n > 0) {
            if (off_ == len_ && !next()) {
                const size_t k = std::min(n, sizeof trailer_ - trailer_len_);
                if (k == 0) {
                    error = "bytes after the trailer";
                    return false;
                }
                std::memcpy(trailer_ + trailer_len_, p, k);
                trailer_len_ += k;
                p += k;
                n -= k;
                continue;
            }
            const size_t k = std::min(n, len_ - off_);
            if (std::memcmp(p, rec_ + off_, k) != 0) {
                error = "content mismatch in record " + std::to_string(seq_ - 1) + " at offset " +
                        std::to_string(off_);
                return false;
            }
            sum_.add(p, k);
            off_ += k;
            p += k;
            n -= k;
        }
        return true;
    }
    bool done() const { return seq_ == kRecords && off_ == len_ && trailer_len_ == 8; }
    uint64_t records() const { return seq_; }
    uint64_t checksum() const { return sum_.h; }
    uint64_t trailer() const {
        uint64_t v;
        std::memcpy(&v, trailer_, 8);
        return v;
    }

  private:
    bool next() {
        if (seq_ == kRecords)
            return false;
        len_ = 1 + sizes_.next() % kMaxRecord;
        fill_record(seq_, len_, rec_);
        ++seq_;
        off_ = 0;
        return true;
    }

    SplitMix sizes_{kSizeSeed};
    std::byte rec_[kMaxRecord];
    size_t len_ = 0;
    size_t off_ = 0;
    uint64_t seq_ = 0;
    Checksum sum_;
    std::byte trailer_[8];
    size_t trailer_len_ = 0;
};

// The reader's wait for data: the shipped wait; a lost wake-up or a vanished writer stops
// it with `error` set.
struct ReaderWaiter {
    RingReader& ring;
    int sock;
    StressPolicy rounds;
    Segment& seg;
    const Expected& expected;
    std::string& error;
    uint64_t& polls;
    uint64_t& spurious;
    bool& peer_closed;

    bool ready() noexcept { return ring.has_data(); }
    WaitPolicy policy() noexcept { return rounds.next(); }
    bool arm() noexcept {
        ring.arm();
        return true;
    }
    void disarm() noexcept { (void)ring.disarm(); }
    Woken sleep() {
        if (peer_closed) {
            (void)ring.disarm();
            error = "writer closed its socket (client_closed=" +
                    std::to_string(seg.header().client_closed.load(std::memory_order_acquire)) +
                    ") after " + std::to_string(expected.records()) + " records";
            return Woken::Stop;
        }
        pollfd pfd{sock, POLLIN, 0};
        const int pr = ::poll(&pfd, 1, kPollTimeoutMs);
        if (pr == 0) {
            error = "lost wake-up: reader got no doorbell for 10 s with an empty ring after " +
                    std::to_string(expected.records()) + " records";
            return Woken::Stop;
        }
        if (pr < 0) {
            if (errno == EINTR)
                return Woken::Again;
            error = std::string("poll: ") + std::strerror(errno);
            return Woken::Stop;
        }
        ++polls;
        return drained();
    }
    Woken drained() {
        size_t count = 0;
        const DrainResult d = drain_doorbells(sock, count);
        if (count == 0 && d == DrainResult::Drained)
            ++spurious;
        if (d == DrainResult::PeerClosed)
            peer_closed = true;
        if (d == DrainResult::Error) {
            error = "drain_doorbells failed";
            return Woken::Stop;
        }
        return Woken::Again;
    }
};

}  // namespace

TEST_CASE("Ring: two-process stress with tiny spin budgets", "[shm][stress]") {
    using clock = std::chrono::steady_clock;
    Segment seg = l5pg::shm::test::make_segment(kMinRingSize, kMinRingSize);
    auto* stats = new (seg.s2c_data()) ChildStats{};
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);

    const auto start = clock::now();
    ChildGuard child;
    child.pid = ::fork();
    REQUIRE(child.pid >= 0);
    if (child.pid == 0) {
        ::close(sv[0]);
        run_writer(seg, sv[1]);  // never returns
    }
    ::close(sv[1]);
    const int sock = sv[0];

    RingReader r(seg.header().c2s, seg.c2s_data(), seg.c2s_size());
    Expected expected;
    SplitMix rng{0x7eade7};
    std::string error;
    uint64_t polls = 0, doorbells = 0, spurious = 0;
    bool peer_closed = false;

    auto wake_writer = [&] {
        if (r.writer_needs_wakeup()) {
            ++doorbells;
            (void)ring_doorbell(sock);  // false once the writer has exited: harmless
        }
    };
    // Returns false when no more data will come (error set).
    auto wait_for_data = [&]() -> bool {
        ReaderWaiter waiter{r,     sock,  StressPolicy(rng), seg,        expected,
                            error, polls, spurious,          peer_closed};
        return l5pg::wait::block_until_ready(waiter);
    };

    std::byte buf[300];
    while (error.empty() && !expected.done()) {
        const uint64_t mode = rng.next() % 4;
        if (mode == 0) {
            // read(): copies across records.
            RingStatus status;
            const size_t n = r.read({buf, 1 + rng.next() % sizeof buf}, status);
            if (status == RingStatus::Corrupt) {
                error = "reader: ring corrupt";
                break;
            }
            if (n > 0) {
                if (!expected.check(buf, n, error))
                    break;
                wake_writer();
            } else if (!wait_for_data()) {
                break;
            }
            continue;
        }
        std::span<const std::byte> data;
        const RingStatus status = r.peek(data);
        if (status == RingStatus::Empty) {
            if (!wait_for_data())
                break;
            continue;
        }
        if (status != RingStatus::Ok) {
            error = "reader: ring corrupt";
            break;
        }
        // mode 1: partial consume; else the whole record.
        const size_t n = mode == 1 ? 1 + rng.next() % data.size() : data.size();
        if (!expected.check(data.data(), n, error))
            break;
        r.consume(n);
        wake_writer();
    }
    const double reader_secs = std::chrono::duration<double>(clock::now() - start).count();

    if (!error.empty())
        FAIL(error);  // ChildGuard kills the writer

    int status = 0;
    REQUIRE(::waitpid(child.pid, &status, 0) == child.pid);
    child.pid = -1;
    const double secs = std::chrono::duration<double>(clock::now() - start).count();
    INFO("child status " << status);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == kChildOk);

    CHECK(expected.done());
    CHECK(expected.records() == kRecords);
    CHECK(expected.trailer() == expected.checksum());
    CHECK(seg.header().client_closed.load() == 1);
    CHECK(r.position() == seg.header().c2s.read_pos.load());
    std::span<const std::byte> rest;
    CHECK(r.peek(rest) == RingStatus::Empty);
    ::close(sock);

    std::fprintf(stderr,
                 "[stress] %llu records in %.2f s (reader done at %.2f s); reader polls %llu "
                 "(spurious %llu), doorbells sent %llu; writer polls %llu, doorbells sent "
                 "%llu\n",
                 static_cast<unsigned long long>(kRecords), secs, reader_secs,
                 static_cast<unsigned long long>(polls), static_cast<unsigned long long>(spurious),
                 static_cast<unsigned long long>(doorbells),
                 static_cast<unsigned long long>(stats->polls.load()),
                 static_cast<unsigned long long>(stats->doorbells.load()));
    // Both sides went through the blocking path, so the protocol was really exercised.
    CHECK(polls > 0);
    CHECK(stats->polls.load() > 0);
}
