// Shared parts of the ping-pong benchmarks: the timed loop and the echo protocol.
//
// Each message carries its sequence number in its first 8 bytes and the complement in its
// last 8; the rest is a fixed pattern. The server checks the sequence (no message lost,
// repeated or torn) and echoes the message; the client compares the whole reply with what
// it sent. Sequence kStopSeq ends the session (echoed once more, then the server exits).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "bench/microbench/pingpong.hpp"
#include "bench/microbench/posix.hpp"
#include "bench/microbench/process.hpp"

namespace l5pg::microbench {

inline constexpr uint64_t kStopSeq = ~uint64_t{0};

inline void fill_pattern(std::byte* p, size_t n) noexcept {
    for (size_t i = 0; i < n; ++i) {
        uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull;
        x ^= x >> 29;
        p[i] = static_cast<std::byte>(x & 0xff);
    }
}

inline void stamp_message(std::byte* msg, size_t n, uint64_t seq) noexcept {
    const uint64_t tail = ~seq;
    std::memcpy(msg, &seq, sizeof seq);
    std::memcpy(msg + n - sizeof tail, &tail, sizeof tail);
}

// False when head and tail disagree (a torn or stale message).
[[nodiscard]] inline bool read_stamp(const std::byte* msg, size_t n, uint64_t& seq) noexcept {
    uint64_t tail;
    std::memcpy(&seq, msg, sizeof seq);
    std::memcpy(&tail, msg + n - sizeof tail, sizeof tail);
    return tail == ~seq;
}

// Runs round_trip(seq) with seq = 0, 1, 2, ...: first for the warm-up time, then timed.
// The clock is read once per batch, sized from the warm-up to ~20 us.
template <class RoundTrip>
PingPongRun timed_loop(RoundTrip&& round_trip, const Timing& timing, uint64_t& seq) {
    using clock = std::chrono::steady_clock;
    using seconds = std::chrono::duration<double>;
    const auto w0 = clock::now();
    uint64_t warm = 0;
    do {
        round_trip(seq++);
        ++warm;
    } while (seconds(clock::now() - w0).count() < timing.warmup_seconds);
    const double per_rt = seconds(clock::now() - w0).count() / static_cast<double>(warm);
    const uint64_t batch = static_cast<uint64_t>(std::clamp(20e-6 / per_rt, 1.0, 1024.0));

    PingPongRun run;
    const auto t0 = clock::now();
    double elapsed = 0;
    do {
        for (uint64_t i = 0; i < batch; ++i)
            round_trip(seq++);
        run.round_trips += batch;
        elapsed = seconds(clock::now() - t0).count();
    } while (elapsed < timing.seconds);
    run.elapsed_seconds = elapsed;
    run.round_trips_per_second = static_cast<double>(run.round_trips) / elapsed;
    return run;
}

// One client round trip over a byte-stream link with send(const byte*, n) and
// recv(byte*, n): stamp, send, `in_between()` (the server's turn when both ends run in
// one thread), receive and compare the whole reply.
template <class Link, class InBetween>
void echo_round_trip(Link& link, std::vector<std::byte>& sent, std::vector<std::byte>& reply,
                     uint64_t seq, InBetween&& in_between) {
    stamp_message(sent.data(), sent.size(), seq);
    link.send(sent.data(), sent.size());
    in_between();
    link.recv(reply.data(), reply.size());
    if (std::memcmp(sent.data(), reply.data(), sent.size()) != 0)
        throw BenchError("reply " + std::to_string(seq) + " differs from the request");
}

// Server turn: receives one message, checks its sequence against `expect`, echoes it.
// Returns the sequence it carried (kStopSeq ends the session).
template <class Link>
uint64_t echo_once(Link& link, std::vector<std::byte>& buf, uint64_t expect) {
    link.recv(buf.data(), buf.size());
    uint64_t seq = 0;
    if (!read_stamp(buf.data(), buf.size(), seq))
        throw BenchError("server: torn message (head and tail sequence differ)");
    if (seq != expect && seq != kStopSeq)
        throw BenchError("server: got message " + std::to_string(seq) + ", expected " +
                         std::to_string(expect));
    link.send(buf.data(), buf.size());
    return seq;
}

// Client side: timed round trips, then the stop message.
template <class Link>
PingPongRun echo_client(Link& link, size_t msg_bytes, const Timing& timing) {
    std::vector<std::byte> sent(msg_bytes), reply(msg_bytes);
    fill_pattern(sent.data(), msg_bytes);
    auto round_trip = [&](uint64_t seq) { echo_round_trip(link, sent, reply, seq, [] {}); };
    uint64_t seq = 0;
    PingPongRun run = timed_loop(round_trip, timing, seq);
    round_trip(kStopSeq);
    return run;
}

// Server side: echoes until kStopSeq. Returns the child exit code.
template <class Link>
int echo_server(Link& link, size_t msg_bytes, ChildReport& report) {
    std::vector<std::byte> buf(msg_bytes);
    for (uint64_t expect = 0;; ++expect) {
        if (echo_once(link, buf, expect) == kStopSeq) {
            report.count[0].store(expect);
            return kChildOk;
        }
    }
}

// Fork the echo server, run the client, check the server's verdict.
template <class ServerBody, class ClientBody>
PingPongRun run_two_processes(const Placement& placement, ServerBody&& server,
                              ClientBody&& client) {
    SharedReport report;
    ChildProcess child =
        ChildProcess::spawn(placement, report.get(), [&] { return server(report.get()); });
    PingPongRun run;
    try {
        run = client();
    } catch (const BenchError& e) {
        // The child's message usually says more (e.g. the server saw a bad sequence).
        const std::string why = report.message();
        throw BenchError(why.empty() ? e.what() : std::string(e.what()) + "; server: " + why);
    }
    child.wait_ok(report);
    return run;
}

}  // namespace l5pg::microbench
