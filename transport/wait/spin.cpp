#include "transport/wait/spin.hpp"

#include <sched.h>

namespace l5pg::wait {

void sched_yield_noexcept() noexcept {
    ::sched_yield();
}

}  // namespace l5pg::wait
