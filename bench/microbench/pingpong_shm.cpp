// Ping-pong over the project's SHM rings: one Segment (client->server and
// server->client rings, each double-mapped), plus a socket pair for the doorbell, as in
// a real session. The client is the segment's creator; the child inherits the mapping.
//
// pingpong_shm_local runs both ends in one thread: every message is already there when
// it is read, so no cache line crosses between cores. Its round-trip time is what the
// ring code itself costs per round trip, the part of the SHM round trip the cache-line
// floor does not pay.
#include <string>
#include <vector>

#include "bench/microbench/pingpong.hpp"
#include "bench/microbench/pingpong_loop.hpp"
#include "bench/microbench/shm_link.hpp"
#include "transport/shm/segment.hpp"

namespace l5pg::microbench {

PingPongRun pingpong_shm(bool spin_only, size_t msg_bytes, size_t ring_bytes,
                         wait::WaitPolicy budget, const Timing& timing,
                         const Placement& placement) {
    shm::Segment seg = make_segment(ring_bytes, ring_bytes);
    FdPair doorbell = make_socketpair();
    const ShmWait mode = spin_only ? ShmWait::Spin : ShmWait::Adaptive;

    auto server = [&](ChildReport& report) {
        doorbell.a.reset();
        ShmLink link = server_end(seg, doorbell.b.get(), mode, budget);
        const int code = echo_server(link, msg_bytes, report);
        report.count[1].store(link.polls());
        report.count[2].store(link.doorbells());
        return code;
    };
    PingPongRun run;
    auto client = [&] {
        doorbell.b.reset();
        ShmLink link = client_end(seg, doorbell.a.get(), mode, budget);
        run = echo_client(link, msg_bytes, timing);
        run.polls = link.polls();
        run.doorbells = link.doorbells();
        return run;
    };
    return run_two_processes(placement, server, client);
}

PingPongRun pingpong_shm_local(size_t msg_bytes, size_t ring_bytes, wait::WaitPolicy budget,
                               const Timing& timing) {
    shm::Segment seg = make_segment(ring_bytes, ring_bytes);
    FdPair doorbell = make_socketpair();
    ShmLink client = client_end(seg, doorbell.a.get(), ShmWait::Adaptive, budget);
    ShmLink server = server_end(seg, doorbell.b.get(), ShmWait::Adaptive, budget);
    std::vector<std::byte> sent(msg_bytes), reply(msg_bytes), echoed(msg_bytes);
    fill_pattern(sent.data(), msg_bytes);
    uint64_t expect = 0;
    auto round_trip = [&](uint64_t seq) {
        echo_round_trip(client, sent, reply, seq,
                        [&] { (void)echo_once(server, echoed, expect++); });
    };
    uint64_t seq = 0;
    return timed_loop(round_trip, timing, seq);
}

}  // namespace l5pg::microbench
