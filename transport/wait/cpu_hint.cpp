#include "transport/wait/cpu_hint.hpp"

#include <sched.h>

#include <cerrno>

namespace l5pg::wait {

uint32_t sole_cpu_of_this_thread() noexcept {
    cpu_set_t set;
    CPU_ZERO(&set);
    // Inside the shim's send() and recv(), which succeed with errno as they found it (EINVAL
    // here on hosts with more than CPU_SETSIZE CPUs).
    const int saved = errno;
    const bool sole = ::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) == 1;
    errno = saved;
    if (!sole)
        return 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (CPU_ISSET(cpu, &set))
            return static_cast<uint32_t>(cpu) + 1;
    }
    return 0;
}

}  // namespace l5pg::wait
