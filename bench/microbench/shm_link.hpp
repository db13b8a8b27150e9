// A byte-stream endpoint over the project's SHM rings (transport/shm), waiting with the
// shim channel's wait (transport/wait/block.hpp): after publishing, wake a sleeping peer
// through the doorbell socket; when the ring is empty (or full), spin, then sched_yield,
// then arm the flag, re-check and poll() the doorbell socket.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "transport/shm/ring.hpp"
#include "transport/shm/segment.hpp"
#include "transport/wait/policy.hpp"
#include "transport/wait/session_policy.hpp"

namespace l5pg::microbench {

// Segment::create or throw BenchError.
[[nodiscard]] shm::Segment make_segment(size_t c2s_bytes, size_t s2c_bytes);

enum class ShmWait {
    Spin,      // busy-poll the ring with `pause`; no fences for the flags, no doorbell
    Adaptive,  // the channel's wait (transport/wait/block.hpp) with a fixed WaitPolicy
};

// Stall detector for busy loops: call tick() every few thousand spins; throws
// BenchError when no progress was made for kStallSeconds.
class StallGuard {
  public:
    static constexpr int kStallSeconds = 10;
    explicit StallGuard(std::string_view what) noexcept : what_(what) {}
    void tick();

  private:
    std::string_view what_;
    int64_t start_ns_ = -1;
};

class ShmLink {
  public:
    // `tx` and/or `rx` may be default-constructed for a one-way link. `doorbell` is this
    // side's end of the socket pair (unused with ShmWait::Spin).
    // `my_hint`/`peer_hint`: the segment header's placement-hint fields of this end and the
    // other (Adaptive mode decides each wait's policy from them as the shim's channel does).
    ShmLink(shm::RingWriter tx, shm::RingReader rx, int doorbell, ShmWait mode,
            wait::WaitPolicy budget, std::atomic<uint32_t>* my_hint = nullptr,
            const std::atomic<uint32_t>* peer_hint = nullptr) noexcept
        : tx_(tx),
          rx_(rx),
          sock_(doorbell),
          mode_(mode),
          budget_(budget),
          my_hint_(my_hint),
          peer_hint_(peer_hint) {}

    // Writes all n bytes (several records when needed), waiting for space. Throws BenchError.
    void send(const std::byte* data, size_t n);
    // Reads exactly n bytes, waiting for data. Throws BenchError.
    void recv(std::byte* out, size_t n);
    // Spins until the reader consumed everything this side published.
    void wait_until_drained();

    [[nodiscard]] uint64_t polls() const noexcept { return polls_; }          // times blocked
    [[nodiscard]] uint64_t doorbells() const noexcept { return doorbells_; }  // bytes sent

  private:
    template <class Ready, class Ring>
    void wait(Ready ready, Ring& ring, bool for_write);
    void ring_doorbell();

    shm::RingWriter tx_;
    shm::RingReader rx_;
    int sock_ = -1;
    ShmWait mode_;
    wait::WaitPolicy budget_;
    std::atomic<uint32_t>* my_hint_;
    const std::atomic<uint32_t>* peer_hint_;
    wait::SoleCpuHint sole_cpu_;
    wait::AdaptiveSpin spin_;  // never fed: the benchmark measures the configured budget
    uint64_t polls_ = 0;
    uint64_t doorbells_ = 0;
};

// The two ends of a segment's ring pair, as in a session: the client writes client->server
// and reads server->client, the server the other way round.
[[nodiscard]] ShmLink client_end(const shm::Segment& seg, int doorbell, ShmWait mode,
                                 wait::WaitPolicy budget);
[[nodiscard]] ShmLink server_end(const shm::Segment& seg, int doorbell, ShmWait mode,
                                 wait::WaitPolicy budget);

}  // namespace l5pg::microbench
