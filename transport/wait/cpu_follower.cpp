#include "transport/wait/cpu_follower.hpp"

#include <cerrno>

namespace l5pg::wait {

void CpuFollower::follow(uint32_t cpu_plus_one) noexcept {
    if (cpu_plus_one == 0 || cpu_plus_one == cpu_plus_one_ || cpu_plus_one > CPU_SETSIZE)
        return;
    const int saved_errno = errno;
    if (cpu_plus_one_ == 0 && ::sched_getaffinity(0, sizeof original_, &original_) != 0) {
        errno = saved_errno;
        return;
    }
    const int cpu = static_cast<int>(cpu_plus_one - 1);
    if (CPU_ISSET(cpu, &original_)) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        if (::sched_setaffinity(0, sizeof one, &one) == 0)
            cpu_plus_one_ = cpu_plus_one;
    }
    errno = saved_errno;
}

void CpuFollower::release() noexcept {
    if (cpu_plus_one_ == 0)
        return;
    const int saved_errno = errno;
    (void)::sched_setaffinity(0, sizeof original_, &original_);
    cpu_plus_one_ = 0;
    errno = saved_errno;
}

}  // namespace l5pg::wait
