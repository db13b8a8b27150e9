// Descriptors a peer attached (SCM_RIGHTS) to bytes read from a Unix stream socket. A plain
// recv() has no room for them: the kernel closes them itself, in the reading thread, on its
// way back from the call (so does closing the socket, for those still queued in it). That
// may block for as long as whoever made them likes: the last close of a socket with
// SO_LINGER and unsent data waits out the linger time (uninterrupted where signals are
// blocked, as in l5pgd's workers). A reader that must never block reads with room for as
// many as one message can carry (SCM_MAX_FD) and hands them to whoever may close them, from
// a socket set up with read_out_of_band_inline(): a plain read drops an out-of-band byte
// (MSG_OOB), and the kernel closes the descriptors sent with it in the reading thread.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <array>
#include <cstddef>

// Linux 6.5+, newer than Debian 12's headers: with SO_PASSPIDFD set, a pidfd of the sender
// comes with each message (SCM_PIDFD).
#ifndef SO_PASSPIDFD
#define SO_PASSPIDFD 76
#endif
#ifndef SCM_PIDFD
#define SCM_PIDFD 0x04
#endif

namespace l5pg::wait {

struct PassedFds {
    static constexpr size_t kMax = 253;  // the kernel's SCM_MAX_FD per message
    // Only the first `count` are set: a PassedFds is on the path of every read of a Unix
    // client socket, which must not clear a kilobyte each time.
    std::array<int, kMax> fds;
    size_t count = 0;
};

// recv(sock, buf, len, flags) that appends the descriptors passed with the bytes to `passed`
// (close-on-exec) rather than letting the kernel close them here. errno as recv()'s. Reads
// stop at a message that carries descriptors (the kernel's rule), so one call takes those of
// one message at most: `passed` has room for them when empty.
[[nodiscard]] ssize_t recv_taking_fds(int sock, void* buf, size_t len, int flags,
                                      PassedFds& passed) noexcept;

// Sets SO_OOBINLINE on a Unix stream socket: an out-of-band byte is read in line, with the
// descriptors sent on it.
void read_out_of_band_inline(int sock) noexcept;

// recv_taking_fds() on a socket with SO_PASSCRED set, on which the kernel attaches the
// sender's credentials to every message read: `message` says whether one was, which the
// result cannot say on a SOCK_SEQPACKET socket (a message of no bytes and the end of the
// stream both return 0).
[[nodiscard]] ssize_t recv_message_taking_fds(int sock, void* buf, size_t len, int flags,
                                              PassedFds& passed, bool& message) noexcept;

}  // namespace l5pg::wait
