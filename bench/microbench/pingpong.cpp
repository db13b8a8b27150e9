#include "bench/microbench/pingpong.hpp"

#include <algorithm>

#include "bench/microbench/posix.hpp"

namespace l5pg::microbench {

std::vector<std::string> pingpong_transports() {
    return {"cacheline", "shm-spin", "shm", "shm-block", "shm-local", "unix", "tcp", "pipe"};
}

bool is_pingpong_transport(const std::string& name) {
    const auto all = pingpong_transports();
    return std::find(all.begin(), all.end(), name) != all.end();
}

bool transport_uses_ring(const std::string& name) {
    return name.starts_with("shm");
}

bool transport_has_msg_size(const std::string& name) {
    return name != "cacheline";
}

std::string transport_description(const std::string& name) {
    if (name == "cacheline")
        return "one std::atomic<uint64_t> per direction on its own cache line, busy-polled";
    if (name == "shm-spin")
        return "SHM rings, both sides busy-poll (pause), no doorbell protocol";
    if (name == "shm")
        return "SHM rings, the channel's wait: spin, sched_yield, then doorbell + poll";
    if (name == "shm-block")
        return "SHM rings, spin and yield budgets 0: every wait sleeps in poll on the doorbell";
    if (name == "shm-local")
        return "SHM rings, both ends in one thread: the ring code's cost, no cross-core transfer";
    if (name == "unix")
        return "AF_UNIX SOCK_STREAM socketpair, blocking read/write";
    if (name == "tcp")
        return "TCP over 127.0.0.1, TCP_NODELAY, blocking read/write";
    if (name == "pipe")
        return "two pipes, blocking read/write";
    return name;
}

PingPongRun run_pingpong(const PingPongCell& cell, const Timing& timing,
                         const Placement& placement) {
    const std::string& t = cell.transport;
    if (t == "cacheline")
        return pingpong_cacheline(timing, placement);
    if (t == "shm-spin")
        return pingpong_shm(true, cell.msg_bytes, cell.ring_bytes, cell.budget, timing, placement);
    if (t == "shm")
        return pingpong_shm(false, cell.msg_bytes, cell.ring_bytes, cell.budget, timing, placement);
    if (t == "shm-block")
        return pingpong_shm(false, cell.msg_bytes, cell.ring_bytes, wait::WaitPolicy::none(),
                            timing, placement);
    if (t == "shm-local")
        return pingpong_shm_local(cell.msg_bytes, cell.ring_bytes, cell.budget, timing);
    if (t == "unix")
        return pingpong_fd(FdKind::Unix, cell.msg_bytes, timing, placement);
    if (t == "tcp")
        return pingpong_fd(FdKind::Tcp, cell.msg_bytes, timing, placement);
    if (t == "pipe")
        return pingpong_fd(FdKind::Pipe, cell.msg_bytes, timing, placement);
    throw BenchError("unknown transport " + t);
}

}  // namespace l5pg::microbench
