// One end of an upgraded connection as a byte stream, whatever carries the bytes: the
// shared-memory rings or an RDMA channel. The shim's send/recv/poll semantics
// (clientlib/channel.cpp) are written once against this interface; each transport
// implements it once (clientlib/shm_end.cpp, clientlib/rdma_end.cpp), and the unit tests
// drive the shim through a loopback end with an error injector
// (tests/unit/shim/loopback_end.hpp).
//
// The session socket stays the application's: it carries doorbell bytes and EOF. Every
// call that may ring or drain it takes `fd`, the descriptor the application used (any
// dup() of the socket), never one remembered from the upgrade, which the application may
// have closed and reused since.
//
// The waiting protocol (transport/wait/block.hpp) needs of an end only ready(), arm(),
// disarm() and on_socket_readable(): arm() sets our waiting flag so that the peer rings
// the doorbell when it makes us ready (arming itself never rings); the caller re-checks
// ready() after arming.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "transport/io_result.hpp"
#include "transport/wait/adaptive_spin.hpp"
#include "transport/wait/policy.hpp"

namespace l5pg::transport {

enum class Want : unsigned char { Read, Write };

class ChannelEnd {
  public:
    virtual ~ChannelEnd() = default;

    // Copies as much of `bytes` as fits towards the peer and publishes it: Ok (bytes <
    // size when the ring filled), WouldBlock when nothing fit, Closed / Error when the
    // peer is gone or the channel broke. An empty `bytes` reports Ok unless one of those.
    [[nodiscard]] virtual IoResult write(int fd, std::span<const std::byte> bytes) = 0;
    // Copies what the peer sent. Closed only once everything it sent was read.
    [[nodiscard]] virtual IoResult read(int fd, std::span<std::byte> out) = 0;
    // MSG_PEEK: copies the bytes from `skip` bytes past the next unread one without
    // consuming anything (statuses as read(); nothing beyond `skip` reads as nothing now).
    [[nodiscard]] virtual bool can_peek() const = 0;
    [[nodiscard]] virtual IoResult peek(std::span<std::byte> out, size_t skip) = 0;
    // ioctl(FIONREAD): how many bytes read() returns now without waiting, as far as the end
    // can tell without consuming: never more than it returns, and not 0 while it has data.
    [[nodiscard]] virtual size_t unread_bytes() = 0;

    // read() (Want::Read) or write() would not return WouldBlock now.
    [[nodiscard]] virtual bool ready(Want want) = 0;
    // Before blocking on the socket: sets our waiting flag. False: do not block (found
    // ready while arming). `wait_id` names the wait (transport/wait/wait_id.hpp): one
    // poll() arms all its ends under one name, so that the peer may ring only one of them;
    // wait::kUnnamedWait elsewhere.
    [[nodiscard]] virtual bool arm(Want want, uint64_t wait_id) = 0;
    // Takes the flag back when the re-check found the end ready. A doorbell the peer
    // already owes is drained later by on_socket_readable().
    virtual void disarm(Want want) = 0;
    // The socket polled readable: consume doorbell bytes, notice EOF.
    virtual void on_socket_readable(int fd) = 0;
    // Before returning to an application that may wait in an epoll set we do not see:
    // leave the socket readable exactly when read() has something (clientlib/channel.hpp).
    // `room_awaited`: another thread sleeps until the server makes room for what it writes
    // (clientlib/end_waiters.hpp), so the doorbell rung for that is its to see.
    virtual void prepare_for_foreign_wait(int fd, bool room_awaited) = 0;

    // For poll(): the peer closed (POLLHUP, also while data is left to read, as a Unix
    // socket reports it); the channel is broken (POLLERR), error() says why.
    [[nodiscard]] virtual bool hung_up() = 0;
    [[nodiscard]] virtual bool broken() const = 0;
    [[nodiscard]] virtual const char* error() const = 0;

    // How long a blocking wait on this end spins and yields before it arms and blocks:
    // `configured`, or what `spin` learned, or none where the placement says so.
    [[nodiscard]] virtual wait::WaitPolicy wait_policy(wait::AdaptiveSpin& spin,
                                                       const wait::WaitPolicy& configured,
                                                       bool only_session) = 0;

    // The application closed its last descriptor of the connection: the peer must still
    // find everything written, and learn that it was an orderly close.
    virtual void close_by_application() = 0;
    // In a forked child: drop this process's copy without touching the parent's session.
    virtual void forget_after_fork() = 0;
};

}  // namespace l5pg::transport
