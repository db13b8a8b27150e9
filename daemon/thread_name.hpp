// Names l5pgd's threads for operators: `ps -L`, `top -H`, `perf` and
// /proc/<pid>/task/<tid>/comm show "l5pgd-worker-0" instead of "l5pgd" for each.
#pragma once

#include <pthread.h>

#include <algorithm>
#include <array>
#include <string_view>

namespace l5pg::daemon {

// Names the calling thread; the kernel keeps 15 bytes, so a longer name is cut there.
// Best effort: a failure leaves the inherited name.
inline void name_this_thread(std::string_view name) noexcept {
    std::array<char, 16> buf{};  // TASK_COMM_LEN, with the terminating NUL
    std::copy_n(name.data(), std::min(name.size(), buf.size() - 1), buf.data());
    (void)pthread_setname_np(pthread_self(), buf.data());
}

}  // namespace l5pg::daemon
