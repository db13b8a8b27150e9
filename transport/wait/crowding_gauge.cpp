#include "transport/wait/crowding_gauge.hpp"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>

namespace l5pg::wait {
namespace {

// Reads a small /proc file into `buf` (NUL-free text); the byte count, or 0 on failure.
size_t read_proc_file(const char* path, char* buf, size_t size) noexcept {
    const long fd = ::syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    const long n = ::syscall(SYS_read, fd, buf, size);
    ::syscall(SYS_close, fd);
    return n > 0 ? static_cast<size_t>(n) : 0;
}

}  // namespace

bool parse_schedstat(const char* text, size_t size, SchedTimes& times) noexcept {
    const char* const end = text + size;
    uint64_t run = 0;
    uint64_t delay = 0;
    auto [p, ec] = std::from_chars(text, end, run);
    if (ec != std::errc{} || p == end || *p != ' ')
        return false;
    auto [q, ec2] = std::from_chars(p + 1, end, delay);
    if (ec2 != std::errc{} || q == end || *q != ' ')
        return false;
    times.run_ns = run;
    times.delay_ns = delay;
    return true;
}

bool parse_uptime_idle(const char* text, size_t size, SchedTimes& times) noexcept {
    const char* const end = text + size;
    const char* p = text;
    while (p != end && *p != ' ')  // skip the uptime
        ++p;
    if (p == end)
        return false;
    uint64_t seconds = 0;
    uint64_t centis = 0;
    auto [q, ec] = std::from_chars(p + 1, end, seconds);
    if (ec != std::errc{} || q == end || *q != '.')
        return false;
    auto [r, ec2] = std::from_chars(q + 1, end, centis);
    if (ec2 != std::errc{} || r - (q + 1) != 2)  // always two decimals
        return false;
    times.host_idle_ns = seconds * 1'000'000'000ULL + centis * 10'000'000ULL;
    return true;
}

std::optional<SchedTimes> read_sched_times() noexcept {
    const int saved_errno = errno;
    SchedTimes times;
    char buf[96];
    size_t n = read_proc_file("/proc/thread-self/schedstat", buf, sizeof buf);
    bool ok = n > 0 && parse_schedstat(buf, n, times);
    if (ok) {
        n = read_proc_file("/proc/uptime", buf, sizeof buf);
        ok = n > 0 && parse_uptime_idle(buf, n, times);
    }
    errno = saved_errno;
    if (!ok)
        return std::nullopt;
    return times;
}

}  // namespace l5pg::wait
