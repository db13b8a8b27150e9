#include "bench/microbench/shm_link.hpp"

#include <poll.h>

#include <cerrno>
#include <chrono>
#include <string>

#include "bench/microbench/posix.hpp"
#include "transport/shm/segment.hpp"
#include "transport/wait/block.hpp"
#include "transport/wait/doorbell.hpp"
#include "transport/wait/spin.hpp"

namespace l5pg::microbench {

using shm::RingStatus;

shm::Segment make_segment(size_t c2s_bytes, size_t s2c_bytes) {
    shm::SysError error;
    auto seg = shm::Segment::create(c2s_bytes, s2c_bytes, error);
    if (!seg)
        throw BenchError(std::string("Segment::create: ") + (error.what ? error.what : "?") +
                         " (errno " + std::to_string(error.err) + ")");
    return std::move(*seg);
}

ShmLink client_end(const shm::Segment& seg, int doorbell, ShmWait mode, wait::WaitPolicy budget) {
    shm::Header& h = seg.header();
    return ShmLink(shm::RingWriter(h.c2s, seg.c2s_data(), seg.c2s_size()),
                   shm::RingReader(h.s2c, seg.s2c_data(), seg.s2c_size()), doorbell, mode, budget,
                   &h.client_sole_cpu, &h.server_sole_cpu);
}

ShmLink server_end(const shm::Segment& seg, int doorbell, ShmWait mode, wait::WaitPolicy budget) {
    shm::Header& h = seg.header();
    return ShmLink(shm::RingWriter(h.s2c, seg.s2c_data(), seg.s2c_size()),
                   shm::RingReader(h.c2s, seg.c2s_data(), seg.c2s_size()), doorbell, mode, budget,
                   &h.server_sole_cpu, &h.client_sole_cpu);
}

void StallGuard::tick() {
    const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
    if (start_ns_ < 0) {
        start_ns_ = now;
        return;
    }
    if (now - start_ns_ > int64_t{kStallSeconds} * 1'000'000'000)
        throw BenchError(std::string("no progress for ") + std::to_string(kStallSeconds) +
                         " s while " + std::string(what_) + " (peer stalled or gone)");
}

void ShmLink::ring_doorbell() {
    ++doorbells_;
    if (!wait::ring_doorbell(sock_))
        throw BenchError("doorbell: the peer closed its socket");
}

namespace {

// ShmLink's blocking wait as a wait::Waiter: the channel's wait with a fixed policy, a
// stall check instead of blocking for ever, and errors as exceptions.
template <class Ready, class Ring>
class LinkWaiter {
  public:
    LinkWaiter(Ready ready, Ring& ring, int sock, const wait::WaitPolicy& policy,
               uint64_t& polls) noexcept
        : ready_(ready), ring_(ring), sock_(sock), policy_(policy), polls_(polls) {}

    bool ready() noexcept { return ready_(); }
    wait::WaitPolicy policy() const noexcept { return policy_; }
    bool arm() noexcept {
        ring_.arm();
        return true;
    }
    void disarm() noexcept { (void)ring_.disarm(); }
    wait::Woken sleep() {
        pollfd p{sock_, POLLIN, 0};
        const int rc = ::poll(&p, 1, StallGuard::kStallSeconds * 1000);
        if (rc == 0)
            throw BenchError("no doorbell for 10 s (lost wake-up or peer stalled)");
        if (rc < 0) {
            if (errno == EINTR)
                return wait::Woken::Again;
            throw_errno("poll on the doorbell socket");
        }
        ++polls_;
        size_t count = 0;
        switch (wait::drain_doorbells(sock_, count)) {
            case wait::DrainResult::Drained:
                break;
            case wait::DrainResult::PeerClosed:
                if (ready_())
                    return wait::Woken::Look;
                throw BenchError("the peer closed the doorbell socket");
            case wait::DrainResult::Error:
                throw_errno("recv on the doorbell socket");
        }
        return wait::Woken::Again;
    }

  private:
    Ready ready_;
    Ring& ring_;
    int sock_;
    wait::WaitPolicy policy_;
    uint64_t& polls_;
};

}  // namespace

// Spin mode busy-polls only; Adaptive waits as the shim's channel does.
template <class Ready, class Ring>
void ShmLink::wait(Ready ready, Ring& ring, bool for_write) {
    if (mode_ == ShmWait::Spin) {
        StallGuard guard(for_write ? "waiting for ring space" : "waiting for ring data");
        for (uint32_t i = 1; !ready(); ++i) {
            wait::cpu_relax();
            if ((i & 0xffff) == 0)
                guard.tick();
        }
        return;
    }
    // The channel's decision: no spinning for a peer confined to our one CPU.
    const wait::WaitPolicy policy =
        my_hint_ == nullptr
            ? budget_
            : wait::session_wait_policy({sole_cpu_, *my_hint_, *peer_hint_}, true, spin_, budget_);
    LinkWaiter<Ready, Ring> waiter(ready, ring, sock_, policy, polls_);
    (void)wait::block_until_ready(waiter);  // true: sleep() throws instead of stopping
}

void ShmLink::send(const std::byte* data, size_t n) {
    size_t off = 0;
    for (;;) {
        RingStatus status;
        const size_t written = tx_.write({data + off, n - off}, status);
        if (status == RingStatus::Corrupt)
            throw BenchError("ring corrupt: impossible read position");
        off += written;
        if (written > 0 && mode_ != ShmWait::Spin && tx_.reader_needs_wakeup())
            ring_doorbell();
        if (off == n)
            return;
        wait([this] { return tx_.free_bytes() > 0; }, tx_, true);
    }
}

void ShmLink::recv(std::byte* out, size_t n) {
    size_t got = 0;
    for (;;) {
        RingStatus status;
        const size_t k = rx_.read({out + got, n - got}, status);
        if (status == RingStatus::Corrupt)
            throw BenchError("ring corrupt: impossible record length");
        got += k;
        if (k > 0 && mode_ != ShmWait::Spin && rx_.writer_needs_wakeup())
            ring_doorbell();
        if (got == n)
            return;
        wait([this] { return rx_.has_data(); }, rx_, false);
    }
}

void ShmLink::wait_until_drained() {
    StallGuard guard("waiting for the reader to drain the ring");
    for (uint32_t i = 1; !tx_.empty(); ++i) {
        wait::cpu_relax();
        if ((i & 0x3ff) == 0)
            wait::sched_yield_noexcept();  // lets a reader on the same CPU run
        if ((i & 0xffff) == 0)
            guard.tick();
    }
}

}  // namespace l5pg::microbench
