// A client upgraded to shared memory (client_end.hpp): the segment it passed, our reader
// of its client->server ring and writer of the server->client ring, and the doorbell
// protocol on its socket, including the credit that closes a client ringing for no
// reason. Everything in the segment is written by the client: every position and length
// is checked by the rings (transport/shm/ring.cpp); nonsense closes just this session.
#pragma once

#include "daemon/byte_queue.hpp"
#include "daemon/client_end.hpp"
#include "daemon/doorbell_coalescer.hpp"
#include "daemon/metrics.hpp"
#include "daemon/segment_registry.hpp"
#include "transport/shm/ring.hpp"
#include "transport/shm/segment.hpp"

namespace l5pg::daemon {

class ShmClientEnd final : public ClientEnd {
  public:
    // `client_pid` (SO_PEERCRED) and the worker's `coalescer`: one doorbell per client wait.
    ShmClientEnd(shm::Segment segment, SegmentRegistry::Claim claim, int socket,
                 ClientEndHost& host, Metrics& metrics, pid_t client_pid,
                 DoorbellCoalescer& coalescer);

    [[nodiscard]] bool polled() const noexcept override { return true; }
    void on_socket_readable() override;
    void on_socket_writable() override {}
    void progress(bool forwarding) override;
    [[nodiscard]] IoStatus peek(std::span<const std::byte>& data) override;
    void consume(size_t n) override;
    void want_input(bool) override {}
    [[nodiscard]] bool input_exhausted() override { return !from_client_.has_data(); }
    [[nodiscard]] IoStatus reserve(size_t want, std::span<std::byte>& space) override;
    void commit(size_t n) override;
    void send(std::span<const std::byte> bytes) override;
    void send_if_room(std::span<const std::byte> message) override;
    void flush() override { (void)flush_pending(); }
    [[nodiscard]] bool output_queued() const noexcept override { return !pending_.empty(); }
    [[nodiscard]] bool has_room() override { return !ring_full_; }
    [[nodiscard]] bool resume_output() override;
    [[nodiscard]] bool arm_before_block(bool input_wanted, uint64_t wait_id) override;
    void disarm_after_block() override;
    [[nodiscard]] bool shares_sole_cpu(uint32_t worker_sole_cpu) noexcept override;
    [[nodiscard]] uint32_t client_cpu() noexcept override;
    void on_client_gone(bool) override;
    void on_input_done() override {}
    void on_close(bool error, bool client_gone) override;
    void reap(UniqueFd&) override {}

  private:
    void wake_client();  // one doorbell byte
    // After publishing: the doorbell if the client waits for it, once per named wait.
    void wake_reader_if_waiting();
    void grant_doorbells(unsigned occasions) noexcept;
    [[nodiscard]] bool account_doorbells(size_t count);  // false: closed (doorbell flood)
    void answer_poke();
    // The ring is full: arms writer_waiting, then re-checks (Dekker). Full (ring_full_ set:
    // the client's next consume rings us), Ok (disarmed: try again), Corrupt (closed).
    [[nodiscard]] shm::RingStatus await_room();
    // Moves pending_ into the ring as far as it has room; false: closed (corrupt ring).
    bool flush_pending();

    shm::Segment segment_;
    SegmentRegistry::Claim claim_;  // segment_'s entry in the registry
    const int socket_;              // the session's (Session owns it)
    ClientEndHost& host_;
    Metrics& metrics_;
    const pid_t client_pid_;
    DoorbellCoalescer& coalescer_;
    shm::RingReader from_client_;
    shm::RingWriter to_client_;
    void close_for_read_position();

    bool ring_full_ = false;  // the server->client ring had no room
    // What send() could not put into the ring at once (a pooled session's greeting with
    // the answers behind it can exceed a small ring): it goes first once there is room,
    // and reserve() waits for it. Only the session's own messages land here, a few per
    // session; Postgres's stream goes through reserve(), which stops reading when full.
    ByteQueue pending_;
    // Doorbell credit (see grant_doorbells()): what a session starts with and may save up.
    static constexpr int64_t kDoorbellSlack = 4096;
    int64_t doorbell_credit_ = kDoorbellSlack;
    uint64_t doorbells_received_ = 0;
    // Doorbells drained since a poke was last answered: a poke is a flag and a doorbell.
    bool poke_rung_ = false;
};

}  // namespace l5pg::daemon
