// Moving the calling thread onto one CPU and back again (sched_setaffinity on the thread
// itself): how an l5pgd worker that blocks for a lone session's client joins that client's
// CPU (daemon/worker.cpp, shm.follow_client_cpu).
//
// Why: with two clients on two CPUs the kernel sometimes starts both clients on one CPU and
// l5pgd and the backends on the other; every blocking hand-off then crosses CPUs, and a run
// stays slow until the load balancer happens to move a client (0.2-5 s). A worker on its
// client's CPU wakes the backend there too, so each client's chain settles on one CPU,
// where a hand-off is a cheap switch (docs/performance.md, "Two clients").
#pragma once

#include <sched.h>

#include <cstdint>

namespace l5pg::wait {

// One per thread that moves itself; not thread-safe. The destructor does not restore the
// mask: the owner calls release() on the thread it moved (a destructor may run elsewhere).
class CpuFollower {
  public:
    // Runs the calling thread on CPU `cpu_plus_one - 1` (the placement hints' encoding, 0 =
    // unknown) if that CPU is in the mask the thread had before it first followed; otherwise,
    // or when the system call fails (a cpuset that forbids it), nothing changes. Remembers
    // the original mask on the first call after release().
    void follow(uint32_t cpu_plus_one) noexcept;
    // Gives the thread back the mask it had before it first followed; a no-op when it does not
    // follow. A mask set by someone else meanwhile (taskset -p) is overwritten.
    void release() noexcept;
    [[nodiscard]] bool following() const noexcept { return cpu_plus_one_ != 0; }

  private:
    cpu_set_t original_{};
    uint32_t cpu_plus_one_ = 0;  // the CPU followed + 1, 0 when not following
};

}  // namespace l5pg::wait
