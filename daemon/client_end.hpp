// The client's side of a session as Session sees it -- a socket (Unix, TCP, through TLS or
// not), the shared-memory rings, or the RDMA channel -- so that Session's forwarding,
// startup reading, departure and closing are written once, whatever the transport
// (PgBouncer's SBufIO is the model). One implementation per transport:
// client_end_socket.cpp, client_end_shm.cpp, client_end_rdma.cpp. Session starts with a
// socket end and swaps in an SHM or RDMA end when the client upgrades.
//
// Input (the client's bytes, towards Postgres) is peek()/consume(), so SHM forwarding sends
// straight from the ring; output (Postgres's bytes) is reserve()/commit(), so Session
// receives straight into the ring. Socket and RDMA ends stage bytes in a queue of their own.
//
// An end tells its session what happened through ClientEndHost: the client left (EOF,
// reset, its closed flag, the channel closed), or broke the protocol (the session closes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "daemon/unique_fd.hpp"
#include "transport/io_result.hpp"
#include "transport/wait/passed_fds.hpp"

namespace l5pg::daemon {

using transport::IoStatus;

class ClientEndHost {
  public:
    // The client left: what it published still goes to Postgres (session_depart.cpp).
    // `may_still_read`: a socket client's EOF, which may be a shutdown(SHUT_WR) only.
    virtual void client_departed(std::string reason, bool error = false,
                                 bool may_still_read = false) = 0;
    // The socket itself reported EOF or a reset: the departure was seen on it.
    virtual void client_socket_ended() = 0;
    // The client broke the protocol, or its end failed: the session closes now.
    virtual void close(std::string_view reason, bool error = false) = 0;
    // The client attached descriptors to bytes on its socket (SCM_RIGHTS) other than an
    // upgrade request's memfd, which no client of Postgres's protocol does: they are closed
    // off the worker (foreign_fds.hpp), `passed` is left empty, and the session closes.
    virtual void client_passed_fds(wait::PassedFds& passed) = 0;
    // The client socket's readiness events (socket ends; SHM and RDMA ends read doorbells
    // and EOF through the read event).
    virtual void watch_client_readable(bool on) = 0;
    virtual void watch_client_writable(bool on) = 0;
    // limits.session_buffer_bytes: how much an end queues for the client.
    [[nodiscard]] virtual size_t high_water() const noexcept = 0;
    // The client left (client_departed() was called): nothing more comes from it. The
    // session keeps this, and the next, for every end; an end asks rather than copies.
    [[nodiscard]] virtual bool client_gone() const noexcept = 0;
    // ... and cannot read either: whatever Postgres sends is discarded.
    [[nodiscard]] virtual bool discarding_output() const noexcept = 0;

  protected:
    ~ClientEndHost() = default;
};

class ClientEnd {
  public:
    virtual ~ClientEnd() = default;

    // True for the ends the worker's polling loop drives (SHM, RDMA): the upgraded ones.
    // A socket end moves on its socket's events.
    [[nodiscard]] virtual bool polled() const noexcept = 0;

    // ---- input: the client's bytes, towards Postgres
    // Its socket is readable: data (socket), doorbell bytes or EOF (SHM, RDMA).
    virtual void on_socket_readable() = 0;
    // Before each round of moving bytes: completions (RDMA), the client's closed flag and
    // its pokes (SHM). `forwarding`: the session is past its startup.
    virtual void progress(bool forwarding) = 0;
    // The client's next bytes, not consumed: Ok (`data` non-empty) or WouldBlock. A client
    // that left or broke the protocol has been reported to the host then.
    [[nodiscard]] virtual IoStatus peek(std::span<const std::byte>& data) = 0;
    virtual void consume(size_t n) = 0;
    // Input wanted or not (Postgres's socket is full): a socket end stops reading.
    virtual void want_input(bool on) = 0;
    // Everything the client sent has been consumed, and nothing more can come (after
    // it left).
    [[nodiscard]] virtual bool input_exhausted() = 0;

    // ---- output: Postgres's bytes, towards the client
    // Room for up to `want` bytes: Ok (`space` non-empty), WouldBlock (full: has_room() is
    // false until the client takes some; the end is woken then), or Error (reported).
    [[nodiscard]] virtual IoStatus reserve(size_t want, std::span<std::byte>& space) = 0;
    // Publishes `n` bytes of the reserved space: wakes the client, or sends what it takes.
    // 0 gives the reservation back.
    virtual void commit(size_t n) = 0;
    // Bytes the session makes (an 'N', an ErrorResponse): queued or written whole.
    virtual void send(std::span<const std::byte> bytes) = 0;
    // A FATAL at shutdown: all of it if it fits now, else nothing (half a message would
    // break the client's framing).
    virtual void send_if_room(std::span<const std::byte> message) = 0;
    // Sends what is queued as far as the client takes it now.
    virtual void flush() = 0;
    // The socket takes bytes again after a flush() it refused (socket ends: they asked for
    // this with watch_client_writable(); till then flush() does not try, since commit()
    // and send() flush and the session flushes once more after them).
    virtual void on_socket_writable() = 0;
    [[nodiscard]] virtual bool output_queued() const noexcept = 0;
    [[nodiscard]] virtual bool has_room() = 0;
    // After the client made room that reserve() found missing: true when reading from
    // Postgres may resume (SHM; socket and RDMA ends flush here and say has_room()).
    [[nodiscard]] virtual bool resume_output() = 0;

    // ---- the worker about to block (polled ends)
    // Arms the client's wake-up of the worker; true when the end is ready already (then
    // the worker must not block). `input_wanted`: Session would forward input now.
    // `wait_id` names this block of the worker (transport/wait/wait_id.hpp): a client
    // process rings once per name, however many of its sessions the worker serves.
    [[nodiscard]] virtual bool arm_before_block(bool input_wanted, uint64_t wait_id) = 0;
    virtual void disarm_after_block() = 0;
    // Publishes the worker's placement hint; true when the client is confined to that
    // same single CPU (transport/wait/cpu_hint.hpp).
    [[nodiscard]] virtual bool shares_sole_cpu(uint32_t worker_sole_cpu) noexcept = 0;
    // The CPU the client last began a wait on + 1, as it says (0: unknown or not told).
    [[nodiscard]] virtual uint32_t client_cpu() noexcept { return 0; }

    // ---- ending
    // The client left: nothing more goes to it unless `may_still_read`; stop waiting for
    // it to make room.
    virtual void on_client_gone(bool may_still_read) = 0;
    // Everything the client sent is in Postgres's socket: free what only served reading.
    virtual void on_input_done() = 0;
    // The session closes: tell the client no more comes (SHM), decide about lingering.
    virtual void on_close(bool error, bool client_gone) = 0;
    // At reaping: an end that must outlive its session (RDMA flushing its last bytes)
    // takes the socket it rings along.
    virtual void reap(UniqueFd& socket) = 0;
};

}  // namespace l5pg::daemon
