// The process's open descriptors as /proc/self/fd lists them, walked without allocating
// (getdents64() rather than readdir()) and async-signal-safe: for the shim's rare looks at
// what the process has open (an io_uring instance; the highest descriptor for select()).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>

#include "clientlib/real_calls.hpp"

namespace l5pg::shim {

namespace detail {
inline int fd_number(const char* name) {
    int fd = 0;
    for (; *name >= '0' && *name <= '9'; ++name)
        fd = fd * 10 + (*name - '0');
    return fd;
}
}  // namespace detail

// Calls visit(dir, name, fd) for each open descriptor (`dir`: the open directory, for
// *at() calls on `name`) until it returns true. False when /proc/self/fd cannot be read.
template <class Visit>
bool walk_open_fds(Visit&& visit) {
    // thread-self: /proc/self/fd lists nothing once the main thread has exited.
    const int dir =
        static_cast<int>(::open("/proc/thread-self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dir < 0)
        return false;
    alignas(8) std::array<char, 4096> buf;
    bool done = false;
    while (!done) {
        const long n = ::syscall(SYS_getdents64, dir, buf.data(), buf.size());
        if (n <= 0)
            break;
        for (long at = 0; at < n && !done;) {
            const auto* entry = reinterpret_cast<const dirent64*>(buf.data() + at);
            at += entry->d_reclen;
            if (entry->d_name[0] != '.')
                done = visit(dir, entry->d_name, detail::fd_number(entry->d_name));
        }
    }
    (void)real().close(dir);
    return true;
}

}  // namespace l5pg::shim
