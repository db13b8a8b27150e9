// Library load: resolve libc, read the environment, register the fork handler; _Fork(),
// which runs no fork handlers; and the public C API (l5pg.h).
#include <pthread.h>
#include <unistd.h>

#include "clientlib/channel.hpp"
#include "clientlib/channel_ref.hpp"
#include "clientlib/debug_log.hpp"
#include "clientlib/fd_table.hpp"
#include "clientlib/l5pg.h"
#include "clientlib/real_calls.hpp"
#include "clientlib/settings.hpp"
#include "clientlib/shm_end.hpp"
#include "clientlib/upgrade.hpp"
#include "l5pg_version.hpp"
#include "transport/wait/wait_id.hpp"

namespace l5pg::shim {
namespace {

// A forked child must never touch its parent's rings: l5pgd serves exactly one reader
// and one writer per ring. Its copies of upgraded fds report EOF/EPIPE instead.
void after_fork_in_child() {
    fd_table_take_ownership();
    fd_mark_all_forked();
    wait::seed_wait_ids();  // the parent goes on counting from the same start
    shm_forget_rung_waits_after_fork();
    channel_forget_all_after_fork();
    rdma_forget_after_fork();
}

__attribute__((constructor)) void load_shim() {
    resolve_real_calls();
    fd_table_take_ownership();
    load_settings();
    wait::seed_wait_ids();
    ::pthread_atfork(nullptr, nullptr, after_fork_in_child);
    debug_log()
        .str("libl5pg " L5PG_VERSION " loaded, transport ")
        .str(settings().mode == TransportMode::Off    ? "off"
             : settings().mode == TransportMode::Rdma ? "rdma"
                                                      : "auto")
        .end();
}

}  // namespace
}  // namespace l5pg::shim

extern "C" {

// _Fork() (glibc 2.34, for a fork from a signal handler) is fork() without the handlers, so
// its child would go on as the parent: writing into the parent's rings, and (the table's
// owner being the parent) keeping entries of fds it closes for the next fd of that number.
// The child's handler is async-signal-safe, as _Fork() is: atomics, munmap() and close().
pid_t _Fork(void) {
    const pid_t pid = l5pg::shim::real().fork_without_handlers();
    if (pid == 0) {
        const int saved = errno;
        l5pg::shim::after_fork_in_child();
        errno = saved;
    }
    return pid;
}

int l5pg_fd_transport(int fd) {
    const l5pg::shim::ChannelRef channel = l5pg::shim::ChannelRef::of(fd);
    return channel ? channel->transport : L5PG_TRANSPORT_SOCKET;
}

const char* l5pg_version(void) {
    return "l5pg " L5PG_VERSION;
}

}  // extern "C"
