#include "clientlib/real_calls.hpp"

#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace l5pg::shim {
namespace {

RealCalls g_real{};
std::atomic<bool> g_resolved{false};

template <class Fn>
void resolve(Fn& slot, const char* name) {
    void* sym = ::dlsym(RTLD_NEXT, name);
    if (sym == nullptr) {
        static constexpr char kPrefix[] = "libl5pg: cannot resolve libc symbol ";
        (void)!::write(2, kPrefix, sizeof kPrefix - 1);
        (void)!::write(2, name, std::strlen(name));
        (void)!::write(2, "\n", 1);
        std::abort();
    }
    slot = reinterpret_cast<Fn>(sym);
}

// fcntl64 only exists in glibc >= 2.28; fall back to fcntl (same ABI on 64-bit).
template <class Fn>
void resolve_optional(Fn& slot, const char* name, Fn fallback) {
    void* sym = ::dlsym(RTLD_NEXT, name);
    slot = sym != nullptr ? reinterpret_cast<Fn>(sym) : fallback;
}

// For a glibc before 2.34, which has neither (no program linked against it calls ours).
int close_range_call(unsigned first, unsigned last, int flags) {
#ifdef SYS_close_range
    return static_cast<int>(::syscall(SYS_close_range, first, last, flags));
#else
    (void)first, (void)last, (void)flags;
    errno = ENOSYS;
    return -1;
#endif
}
void closefrom_call(int lowfd) {
    (void)close_range_call(lowfd < 0 ? 0U : static_cast<unsigned>(lowfd), ~0U, 0);
}
pid_t no_fork_call() {
    errno = ENOSYS;
    return -1;
}

}  // namespace

void resolve_real_calls() {
    if (g_resolved.load(std::memory_order_acquire))
        return;
    RealCalls r{};
    resolve(r.connect, "connect");
    resolve(r.close, "close");
    resolve_optional(r.close_range, "close_range", &close_range_call);
    resolve_optional(r.closefrom, "closefrom", &closefrom_call);
    resolve(r.send, "send");
    resolve(r.sendto, "sendto");
    resolve(r.sendmsg, "sendmsg");
    resolve(r.write, "write");
    resolve(r.writev, "writev");
    resolve(r.recv, "recv");
    resolve(r.recvfrom, "recvfrom");
    resolve(r.recvmsg, "recvmsg");
    resolve(r.read, "read");
    resolve(r.readv, "readv");
    resolve(r.poll, "poll");
    resolve(r.ppoll, "ppoll");
    resolve(r.select, "select");
    resolve(r.pselect, "pselect");
    resolve(r.dup, "dup");
    resolve(r.dup2, "dup2");
    resolve(r.dup3, "dup3");
    resolve(r.fcntl, "fcntl");
    resolve_optional(r.fcntl64, "fcntl64", r.fcntl);
    resolve(r.ioctl, "ioctl");
    resolve(r.epoll_ctl, "epoll_ctl");
    resolve_optional(r.fork_without_handlers, "_Fork", &no_fork_call);
    g_real = r;
    g_resolved.store(true, std::memory_order_release);
}

const RealCalls& real() {
    if (!g_resolved.load(std::memory_order_acquire))
        resolve_real_calls();
    return g_real;
}

}  // namespace l5pg::shim
