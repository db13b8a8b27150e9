// Server end of L5 RDMA channels (l5pgd's side). One ServerEndpoint per worker thread
// owns a mailbox array; every accepted client becomes a ServerSession with its own
// protection domain, area (memory region + rkey), mailbox slot and queue pair.
//
// Worker loop, roughly:
//   n = endpoint.poll(ready)                  -> sessions whose mailbox byte was set
//   for each session with work: session.progress(); session.read(...); session.write(...)
//   idle? n = endpoint.prepare_to_block(ready, settled); if n == 0 && settled: epoll on
//         the session sockets and the device's async_event_fd(); on POLLIN:
//         session.on_socket_readable() / device.process_async_events()
//
// A client is untrusted. Whatever it writes into its area can at worst break its own
// session: lengths are validated, records copied out, positions checked; a record that
// stays incomplete after two further mailbox signals (which RC ordering rules out for
// an honest client) fails the session, as does any device error on its QP. read() and
// write() then return Error and the caller closes that session only.
//
// Not thread-safe: an endpoint and its sessions belong to one thread. The endpoint must
// outlive its sessions.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "transport/rdma/channel/hello.hpp"
#include "transport/rdma/channel/io.hpp"
#include "transport/rdma/channel/link.hpp"
#include "transport/rdma/channel/mailbox.hpp"
#include "transport/rdma/device.hpp"

namespace l5pg::rdma {

struct ServerOptions {
    uint32_t max_sessions = 1024;             // mailbox slots
    size_t max_ring_size = kDefaultRingSize;  // cap on the client->server ring a client asks for
    size_t max_record_payload = 0;            // 0: as large as the client's ring allows
    std::chrono::milliseconds completion_timeout{10000};
};

class ServerSession;

class ServerEndpoint {
  public:
    [[nodiscard]] static std::unique_ptr<ServerEndpoint> create(Device& device,
                                                                const ServerOptions& options,
                                                                std::string& error);
    ~ServerEndpoint();
    ServerEndpoint(const ServerEndpoint&) = delete;
    ServerEndpoint& operator=(const ServerEndpoint&) = delete;

    // Sets up a session for a client whose Hello arrived on `session_fd` (not owned) and
    // fills `reply`, the Hello to send back. The client may write once it has the reply.
    [[nodiscard]] std::unique_ptr<ServerSession> accept(int session_fd, const Hello& client,
                                                        Hello& reply, const QpOptions& qp_options,
                                                        std::string& error);
    // accept() with the Hello exchange done over the session socket (recv, then send).
    [[nodiscard]] std::unique_ptr<ServerSession> accept_on_socket(int session_fd,
                                                                  const QpOptions& qp_options,
                                                                  std::string& error);

    // Sessions whose mailbox byte was set since the last poll (cleared now), at most
    // ready.size(). Read from each until it returns WouldBlock.
    [[nodiscard]] size_t poll(std::span<ServerSession*> ready);

    // Call when about to block. Never blocks itself: handles completions, arms the wait
    // flag of every session in its client's memory (one WRITE per session, only when
    // not armed yet), then clears the mailboxes once more. Returns the sessions that are
    // ready: readable data, EOF or errors, or room for output they wait for (a mailbox
    // byte set with nothing behind it does not count).
    //   returns > 0:                  service them, do not block;
    //   0 and `settled` false:        requests (e.g. the flag WRITEs) are still in
    //                                 flight: block only briefly (or yield) and call again;
    //   0 and `settled` true:         blocking is safe: any later client write rings
    //                                 its session socket.
    // A session whose requests stay unanswered fails after the completion timeout.
    [[nodiscard]] size_t prepare_to_block(std::span<ServerSession*> ready, bool& settled);

    // Waits (at most `max`) for a completion of one session whose requests are in flight,
    // for a worker that got `settled` false and nothing ready: on the soft device the
    // completions come from a device thread that needs the CPU a spinning worker would take.
    void await_completions(std::chrono::microseconds max);

    [[nodiscard]] size_t sessions() const noexcept { return live_.size(); }

    // Private, for make_unique.
    ServerEndpoint(Device& device, const ServerOptions& options, MailboxArray mailboxes);

  private:
    friend class ServerSession;
    void detach(uint32_t slot) noexcept;

    Device& device_;
    ServerOptions options_;
    MailboxArray mailboxes_;
    std::vector<ServerSession*> by_slot_;
    std::vector<ServerSession*> live_;  // the non-null entries of by_slot_, in no order
    std::vector<uint32_t> scratch_;
};

class ServerSession {
  public:
    ~ServerSession();
    ServerSession(const ServerSession&) = delete;
    ServerSession& operator=(const ServerSession&) = delete;

    // Reads what the client sent (byte stream). WouldBlock: nothing complete yet.
    [[nodiscard]] IoResult read(std::span<std::byte> out);
    // Queues as much as fits into the client's ring; never blocks. Ok with fewer bytes,
    // or WouldBlock, when the ring is full: call progress() and retry when writable().
    [[nodiscard]] IoResult write(std::span<const std::byte> bytes);
    // Handles completions (READ results, doorbells owed, errors). False once broken.
    bool progress();
    [[nodiscard]] bool readable();  // read() would not return WouldBlock
    // The owner cannot take input now (Postgres's socket is full, or not connected yet): the
    // endpoint does not count what waits in the ring as a reason to stay awake, only a
    // broken channel (ServerEndpoint::prepare_to_block()).
    void pause_input(bool paused) noexcept { input_paused_ = paused; }
    [[nodiscard]] bool writable();  // write() would accept bytes
    // True while write() left bytes behind for lack of space.
    [[nodiscard]] bool write_blocked() const noexcept { return tx_blocked_; }
    void on_socket_readable();
    // Waits until everything posted has completed (at most the completion timeout):
    // before closing the session, so the client finds every byte that was written.
    [[nodiscard]] bool flush();
    // Non-blocking alternative for a caller that serves other sessions meanwhile: from
    // now on the endpoint neither reports nor arms this session (its owner closed it),
    // and each flush_step() handles completions without posting anything new. True once
    // everything posted has completed or never will (broken, e.g. by the timeout).
    void begin_close() noexcept { closing_ = true; }
    [[nodiscard]] bool flush_step();

    [[nodiscard]] bool broken() const noexcept { return link_.broken(); }
    [[nodiscard]] const std::string& error() const noexcept { return link_.reason(); }
    [[nodiscard]] bool peer_closed() const noexcept { return link_.peer_closed(); }
    // Bytes the queue pair took in from the client so far (soft device: its wire).
    [[nodiscard]] uint64_t bytes_received() const noexcept { return link_.bytes_received(); }
    [[nodiscard]] const ChannelStats& stats() const noexcept { return link_.stats(); }
    [[nodiscard]] int session_fd() const noexcept { return link_.session_fd(); }
    [[nodiscard]] uint32_t slot() const noexcept { return slot_; }

    // Private, for make_unique.
    ServerSession(ServerEndpoint& endpoint, uint32_t slot, const ServerOptions& options);

  private:
    friend class ServerEndpoint;
    [[nodiscard]] bool arm_read();  // posts the flag WRITE (signaled) unless already armed
    void request_space();
    void note_mailbox() noexcept { ++mailbox_epoch_; }

    ServerEndpoint& endpoint_;
    const uint32_t slot_;
    const ServerOptions options_;
    Link link_;
    std::unique_ptr<MemoryRegion> mailbox_mr_;  // declared after link_: deregistered first

    uint64_t mailbox_epoch_ = 0;  // mailbox observations so far
    bool stalled_ = false;        // the record at stall_pos_ was seen in flight ...
    uint64_t stall_pos_ = 0;
    uint64_t stall_epoch_ = 0;   // ... at this epoch
    bool rx_armed_ = false;      // our rx flag is (probably) set in the client's memory
    bool tx_blocked_ = false;    // write() could not place everything
    bool tx_armed_ = false;      // our tx flag is set in the client's memory
    bool closing_ = false;       // begin_close() was called
    bool input_paused_ = false;  // see pause_input()
};

}  // namespace l5pg::rdma
