#include "clientlib/debug_log.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace l5pg::shim {
namespace {
std::atomic<bool> g_debug{false};
}

void set_debug_enabled(bool on) {
    g_debug.store(on, std::memory_order_relaxed);
}
bool debug_enabled() {
    return g_debug.load(std::memory_order_relaxed);
}

DebugLine::DebugLine(bool enabled) : enabled_(enabled) {
    if (!enabled_)
        return;
    str("l5pg[").num(static_cast<uint64_t>(::syscall(SYS_getpid))).str("]: ");
}

void DebugLine::put(char c) {
    if (len_ < sizeof buf_ - 1)
        buf_[len_++] = c;
}

DebugLine& DebugLine::str(const char* s) {
    if (enabled_)
        while (s && *s)
            put(*s++);
    return *this;
}

DebugLine& DebugLine::num(uint64_t v) {
    if (!enabled_)
        return *this;
    char digits[20];
    int n = 0;
    do {
        digits[n++] = static_cast<char>('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (n > 0)
        put(digits[--n]);
    return *this;
}

DebugLine& DebugLine::inum(int64_t v) {
    if (v < 0) {
        str("-");
        return num(static_cast<uint64_t>(-(v + 1)) + 1);
    }
    return num(static_cast<uint64_t>(v));
}

void DebugLine::end() {
    if (!enabled_)
        return;
    buf_[len_++] = '\n';
    const int saved = errno;
    (void)!::syscall(SYS_write, 2, buf_, len_);
    errno = saved;
}

}  // namespace l5pg::shim
