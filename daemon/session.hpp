// One client session: startup handshake (plain, SSL/GSS refusal, cancel forwarding, L5
// upgrade), the upstream connection to Postgres, and byte forwarding in both directions
// through the client's end (client_end.hpp: its socket, its shared-memory rings or its RDMA
// channel), written once for all three.
//
// States: Startup -> Connecting -> Forwarding -> Closed, or Startup/Connecting -> Refusing
// (a FATAL goes out, nothing more is read or forwarded) -> Closed; they change in enter()
// only. Every teardown goes through close(reason), which logs the session id and the
// reason once. A client that leaves
// first does not close the session at once: see client_departed() (session_depart.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/admission.hpp"
#include "daemon/byte_queue.hpp"
#include "daemon/cancel_keys.hpp"
#include "daemon/client_auth.hpp"
#include "daemon/client_end.hpp"
#include "daemon/client_stream.hpp"
#include "daemon/event_ptr.hpp"
#include "daemon/log_limiter.hpp"
#include "daemon/metrics.hpp"
#include "daemon/unique_fd.hpp"
#include "daemon/upstream_resolver.hpp"
#include "protocol/backend_key_watcher.hpp"
#include "protocol/error_response.hpp"
#include "protocol/framing.hpp"
#include "protocol/parameter_status_follower.hpp"
#include "protocol/pool_login_check.hpp"
#include "protocol/pool_reset.hpp"
#include "protocol/server_greeting.hpp"
#include "protocol/startup.hpp"
#include "transport/rdma/channel/hello.hpp"
#include "transport/rdma/channel/offer.hpp"
#include "transport/wait/deadline.hpp"

namespace l5pg::daemon {

class Worker;

enum class SessionState { Startup, Connecting, Forwarding, Refusing, Closed };
[[nodiscard]] std::string_view to_string(SessionState s) noexcept;

class Session final : public ClientEndHost {
  public:
    Session(Worker& worker, uint64_t id, AcceptedClient client);
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    void start();

    // Called by the worker's polling loop for SHM and RDMA sessions: moves the client's
    // data to the upstream socket and resumes reading upstream when the client made room.
    // Returns true if anything moved.
    bool poll_channel();
    // Arms the client's wake-up of the worker before it blocks; returns true if data
    // arrived meanwhile (then the worker must not block).
    bool arm_before_block(uint64_t wait_id);
    void disarm_after_block();

    // Publishes the worker's placement hint into an SHM session's header and tells whether
    // the client is confined to that same single CPU (transport/wait/cpu_hint.hpp); false
    // for other transports.
    [[nodiscard]] bool client_shares_sole_cpu(uint32_t worker_sole_cpu) noexcept;
    [[nodiscard]] uint32_t client_cpu() noexcept;
    // True from forwarding client bytes upstream until Postgres's next bytes arrive:
    // the next event is Postgres's, not the client's.
    [[nodiscard]] bool awaiting_upstream() const noexcept { return awaiting_upstream_; }
    [[nodiscard]] SessionState state() const noexcept { return state_; }
    [[nodiscard]] uint64_t id() const noexcept { return id_; }

    // Immediate teardown (also used at shutdown). `error` counts it in the metrics. Marks
    // the session closed and stops its events; the worker's reap() destroys it (and only
    // then unmaps, closes and frees) after the current callback or polling round.
    void close(std::string_view reason, bool error = false) override;
    // Shutdown (SIGTERM, a second SIGINT): FATAL 57P01 to the client when it can go out
    // now without breaking its framing, then close().
    void terminate_for_shutdown();
    // The backend of a statement (or any request) Postgres has not answered yet, to cancel
    // before a stop closes the session (shutdown_cancels.hpp); nothing while the backend
    // waits for the client, or before Postgres sent its key.
    [[nodiscard]] std::optional<CancelKeys::Backend> backend_of_running_request() const;

    // The client is gone (EOF, ECONNRESET, EPIPE, client_closed, RDMA channel closed):
    // what it published still goes to Postgres before the session closes. Only marks the
    // session; continue_departure() does the work (session_depart.cpp).
    // `may_still_read`: a socket client's EOF, which may be a shutdown(SHUT_WR) only.
    void client_departed(std::string reason, bool error = false,
                         bool may_still_read = false) override;
    // Moves a departure on; a no-op otherwise. Called at the end of every event callback
    // and polling round, where nothing touches the session afterwards.
    void continue_departure();

  private:
    friend struct SessionProbe;  // unit tests put a loopback end in (tests/unit/daemon/)

    // ClientEndHost, for the client's end (client_end.hpp)
    void client_socket_ended() override { client_eof_ = true; }
    void client_passed_fds(wait::PassedFds& passed) override;
    void watch_client_readable(bool on) override { set_event(client_read_.get(), on); }
    void watch_client_writable(bool on) override { set_event(client_write_.get(), on); }
    [[nodiscard]] size_t high_water() const noexcept override;
    [[nodiscard]] bool client_gone() const noexcept override { return client_gone_; }
    [[nodiscard]] bool discarding_output() const noexcept override {
        return client_gone_ && !client_may_read_;
    }
    // The end a client upgraded to replaces the socket end.
    void switch_end(std::unique_ptr<ClientEnd> end);
    // Joins or leaves the worker's polling loop; only changes reach the worker.
    void set_polled(bool on);
    // The one place state_ changes.
    void enter(SessionState next);

    // startup (session_startup.cpp)
    void on_startup_readable();
    bool read_startup_from_socket();
    bool read_startup_from_tls(size_t want);
    bool keep_upgrade_fd(wait::PassedFds& passed);  // false: the session was closed
    // An upgraded client's startup bytes, from its end.
    bool read_startup_from_end();
    // The client's Hello after an RDMA offer, else a startup packet.
    void process_startup_input();
    void process_startup_buffer();
    // admin.database: served by the worker's AdminConsole once admit_to_console() agrees.
    [[nodiscard]] bool is_admin_database(std::string_view database) const;
    [[nodiscard]] AuthVerdict admit_to_console(std::string_view role);
    // False under auth passthrough, where Postgres, not l5pgd, establishes who the client is.
    [[nodiscard]] bool l5pgd_identifies_client() const;
    // The SessionDirectory entry SHOW SESSIONS lists.
    void publish_record(std::string_view role, std::string_view database);
    // For log lines: role, database (once admitted), peer and transport.
    [[nodiscard]] std::string describe() const;
    // Reads from the client's end and processes startup packets until none is complete or
    // the session leaves Startup; several may be queued (SSLRequest, then StartupMessage).
    bool drain_startup();
    void handle_startup_packet(const protocol::StartupPacket& packet, size_t length);
    void handle_upgrade(const protocol::StartupPacket& packet);
    // SSLRequest on the TCP listener with tls.mode allow/require: 'S', then the handshake.
    [[nodiscard]] bool can_start_tls() const noexcept;
    void start_tls();
    void continue_tls_handshake();
    // The SHM end for the memfd the client passed, or why not.
    [[nodiscard]] std::optional<std::string> try_attach(const protocol::L5UpgradeRequest& req,
                                                        std::unique_ptr<ClientEnd>& end);
    // l5pgd's client check (auth.*) for a StartupMessage; refuses with 28000 when it fails.
    [[nodiscard]] bool admit_startup(const protocol::StartupPacket& packet);
    // Whether the session holds one of limits.max_sessions places, taking one if free (at
    // its StartupMessage or upgrade request: daemon/session_cap.hpp).
    [[nodiscard]] bool has_session_place();
    // A StartupMessage l5pgd does not serve now (draining, limits.max_sessions): counted,
    // logged and answered FATAL `sqlstate`, as Postgres answers it after TLS negotiation.
    void refuse_startup(ConnectionRefusal refusal, std::string_view sqlstate,
                        std::string_view message);
    void begin_upstream(std::span<const std::byte> first_bytes, bool cancel);
    void open_admin_console();
    void connect_upstream();
    void on_upstream_lookup(UpstreamResolver::Answer addresses);
    void connect_to_address();  // dial_'s current address, or the next if it fails at once
    void finish_connect_attempt();
    // The current address failed (err 0: timed out): the next one, or the client is told.
    void next_upstream_address(int err);
    void watch_upstream();  // the upstream socket's events, once upstream_ is set
    void on_upstream_connected();
    // err 0: timeout; lookup_failure: upstream.host could not be looked up.
    void fail_upstream_connect(int err, std::string_view lookup_failure = {});
    // Sends FATAL `sqlstate` `message` and closes once it is flushed.
    void fail_startup(std::string_view sqlstate, std::string_view message, std::string_view reason);
    void end_with_fatal(std::string_view sqlstate, std::string_view message, std::string reason);
    void drop_upstream();                                             // its events, then its socket
    void reject_startup_packet(const protocol::StartupParse& parse);  // counted, logged, FATAL
    void refuse_cancel(CancelOutcome outcome, std::string_view why);  // counted, logged, closed
    [[nodiscard]] bool within_request_limits(const protocol::StartupPacket& packet);

    // session pooling (session_pool.cpp, upstream_pool.hpp)
    [[nodiscard]] bool pool_applies(const protocol::StartupPacket& packet) const;
    [[nodiscard]] std::string pool_slot() const;
    // A pooled session's start: a kept connection or a new one (upstream.host's answer
    // refreshed, see the definition).
    void start_pooled_upstream();
    // Takes a kept server connection for this client's StartupMessage, if there is one, and
    // asks it the login check (protocol/pool_login_check.hpp); the session stays Connecting.
    [[nodiscard]] bool adopt_idle_upstream();
    // Sends the login check on the idle upstream socket; false if it did not fit at once.
    [[nodiscard]] bool send_login_check(protocol::PoolLoginCheck::Purpose purpose,
                                        std::string settings_at_start = {});
    void read_login_check_answer();
    void finish_start_check(std::span<const std::byte> rest);
    void abandon_upstream_before_greeting();
    [[nodiscard]] bool client_left_unserved();
    // The kept connection failed its login check, or did not answer (`answered` false): ended,
    // and a new one opened for the client.
    void refuse_reuse(std::string_view why, bool answered = true);
    // Postgres refused a new backend with 53300 while l5pgd keeps idle ones: one ends, and
    // the login is tried again. False when it is not (the client gets the refusal).
    [[nodiscard]] bool make_room_for_login();
    [[nodiscard]] std::optional<RoomMatch> room_match(const PoolDirectory::Key& owner);
    // Ends `old_backend`, then opens a new server connection once Postgres has closed it.
    void reopen_after(UniqueFd old_backend);
    void read_retiring();
    void reopen_upstream();
    void open_upstream(std::span<const std::byte> startup);
    void read_greeting();
    void greet_client();
    void greet_client_then(std::span<const std::byte> rest);
    void give_up_pooling(std::vector<std::byte> received);
    // cancel keys (session_cancel.cpp): a CancelRequest goes to Postgres only with the key
    // of a session l5pgd serves, translated to the backend's.
    // false: refused (refuse_cancel()), the session closed.
    [[nodiscard]] bool look_up_cancel_key(const protocol::StartupPacket& packet);
    [[nodiscard]] bool translate_cancel_key(const protocol::StartupPacket& packet);
    // False when `copy` must not reach the client: see passthrough_login_.
    [[nodiscard]] bool watch_for_key(std::span<const std::byte> copy);
    void refuse_unauthenticated_login();
    [[nodiscard]] bool holding_for_authentication() const noexcept;
    void release_held_input();
    void read_upstream_chunks();
    void note_logged_in();
    // How much of `data` goes to Postgres: all of it, or what precedes the client's Terminate.
    [[nodiscard]] std::span<const std::byte> copy_client_chunk(std::span<const std::byte> data);
    [[nodiscard]] size_t before_terminate(std::span<const std::byte> data);
    void note_forwarded(std::span<const std::byte> sent, size_t walked);
    void note_from_upstream(std::span<const std::byte> bytes);
    // Why the server connection cannot be kept, or nothing if it can (pooled sessions).
    [[nodiscard]] std::optional<std::string_view> pool_refusal() const;
    [[nodiscard]] bool pool_wanted() const;          // pool.mode session, with room for one
    [[nodiscard]] bool on_current_upstream() const;  // upstream.* unchanged since connecting
    // Resets the server connection for the pool if it can be kept; false if not (logged).
    [[nodiscard]] bool try_pool_reset();
    [[nodiscard]] bool start_pool_reset();
    void read_reset_answer();
    void return_to_pool();

    // departure (session_depart.cpp)
    [[nodiscard]] bool drain_client_data();
    [[nodiscard]] bool watch_departed_login(std::span<const std::byte> bytes);
    void discard_upstream();
    void watch_departed_client();
    [[nodiscard]] std::string_view departure_timeout_reason() const;
    void finish_departure(std::string_view how, bool timed_out = false);

    // RDMA upgrade and forwarding (session_rdma.cpp, docs/wire-format.md section 5)
    enum class RdmaPhase { None, AwaitHello, AwaitWire };
    void handle_rdma_upgrade(const protocol::L5UpgradeRequest& req);
    [[nodiscard]] std::optional<std::string> rdma_refusal(const protocol::L5UpgradeRequest& req);
    // Why ring sizes `a` and `b` are refused (above rdma.max_ring_size), if they are.
    [[nodiscard]] std::optional<std::string> ring_size_refusal(uint64_t a, uint64_t b) const;
    // Takes the rings' share of rdma.max_memory (or resizes the one held), or says why not.
    [[nodiscard]] std::optional<std::string> reserve_rdma_memory(uint64_t c2s, uint64_t s2c);
    void on_rdma_hello();
    void try_finish_rdma_accept();
    void finish_rdma_accept(UniqueFd wire);
    void decline_rdma(std::string_view reason);
    void withdraw_wire_offer();
    bool send_now(std::span<const std::byte> bytes);
    static void wire_timer_cb(int fd, short what, void* arg);

    // forwarding (session_forward.cpp)
    // Moves what can move now: startup bytes, the client's bytes to Postgres, Postgres's
    // bytes to a client that made room. True if anything moved.
    bool pump();
    void on_client_writable();
    void on_upstream_readable();
    void on_upstream_writable();
    void read_upstream();
    // One recv() from Postgres into `space`, and what l5pgd reads of Postgres's messages.
    [[nodiscard]] ssize_t recv_upstream(std::span<std::byte> space);
    bool forward_client_to_upstream();
    void discard_client_input();  // nothing more can go to Postgres
    void client_turn_over();      // more client input may wait: come back to it
    void flush_upstream();
    void flush_client();
    void send_to_client(std::span<const std::byte> bytes);
    // Close with `reason` once the client's output has drained (Postgres left, or a refusal
    // is on its way), or for a cancel request once Postgres has closed its connection
    // (session_cancel.cpp).
    void finish_after_client_flush(std::string reason);
    void finish_after_upstream_close(std::string reason);
    void upstream_write_failed(int err);  // a send() to Postgres failed with `err`
    // The bytes metrics and this session's directory record.
    void count_bytes(Direction direction, uint64_t n);
    void set_awaiting_upstream(bool awaiting);
    void note_idle();  // SHOW SESSIONS: waiting for the client
    void update_upstream_reading();

    // events (session.cpp)
    static void client_read_cb(int fd, short what, void* arg);
    static void client_write_cb(int fd, short what, void* arg);
    static void upstream_read_cb(int fd, short what, void* arg);
    static void upstream_write_cb(int fd, short what, void* arg);
    static void timer_cb(int fd, short what, void* arg);
    void arm_timer(uint32_t ms);
    void arm_timer_until(const wait::Deadline& deadline);  // at least 1 ms: a passed one fires
    void set_event(event* ev, bool on);

    Worker& worker_;
    Metrics& metrics_;
    const uint64_t id_;
    Transport transport_;
    const PeerIdentity peer_;
    StartupLimiter::Slot startup_slot_;  // held until the StartupMessage is complete
    SessionCap::Share session_place_;    // taken at the StartupMessage or an upgrade request
    Capacity::Share rdma_memory_;        // the rings of its RDMA channel (rdma.max_memory)
    Capacity::Share console_place_;      // held by an admin console session
    SessionState state_ = SessionState::Startup;
    bool counted_ = false;                            // included in sessions_active
    bool polled_ = false;                             // in the worker's polling loop (set_polled())
    bool cancel_request_ = false;                     // upstream leg only carries a CancelRequest
    CancelKeys::InFlight cancel_in_flight_;           // a CancelRequest with one of l5pgd's keys
    std::optional<protocol::CancelKey> backend_key_;  // the backend's own, once Postgres sent it
    // The key this session's client holds (the backend's own, or l5pgd's for a pooled
    // one), and until Postgres has sent it, what picks it out of Postgres's first bytes.
    CancelKeys::Lease cancel_lease_;
    std::unique_ptr<protocol::BackendKeyWatcher> key_watcher_;
    // What the session closes after, with close_reason_ (finish_after_client_flush(),
    // finish_after_upstream_close()).
    enum class FinishWhen : uint8_t { Open, ClientFlushed, UpstreamClosed };
    FinishWhen finish_when_ = FinishWhen::Open;
    std::string close_reason_;
    bool upstream_blocked_ = false;   // upstream send returned EAGAIN
    bool awaiting_upstream_ = false;  // see awaiting_upstream(); set_awaiting_upstream()
    std::chrono::steady_clock::time_point request_forwarded_at_;  // awaiting_upstream_ began
    bool admin_ = false;             // served by the admin console, not Postgres
    bool admin_may_reload_ = false;  // its role is in admin.users (not only admin.stats_users)
    // auth passthrough: l5pgd checked nothing, so Postgres must ask the client to prove who it
    // is; a login it accepts unasked (a trust or peer rule for l5pgd) is refused.
    bool passthrough_login_ = false;
    bool input_held_ = false;  // see holding_for_authentication()
    struct StartupRequests {   // answered so far: see within_request_limits()
        uint8_t ssl = 0;
        uint8_t gss_enc = 0;
        uint8_t upgrade = 0;
    };
    StartupRequests requests_;
    std::shared_ptr<SessionRecord> record_;  // in the SessionDirectory once admitted
    // metrics.labels: this session's database counters, once Postgres accepted its login.
    bool login_noted_ = false;
    DatabaseCounters* database_counters_ = nullptr;
    // Connecting to Postgres: upstream.host's lookup, then each of its addresses in turn.
    struct UpstreamDial {
        UpstreamResolver::Waiter lookup;     // while upstream.host is looked up
        UpstreamResolver::Answer addresses;  // once known
        size_t current = 0;                  // the address tried now
        // upstream.connect_timeout_ms for the lookup, and again for each address
        wait::Deadline deadline = wait::Deadline::never();
        std::chrono::milliseconds retry_delay{};  // next EAGAIN retry (a Unix socket)
        // A CancelRequest's: where its backend's server was reached, dialled instead of what
        // upstream.* names now (cancel_keys.hpp).
        std::optional<UpstreamAddress> pinned;
    };
    UpstreamDial dial_;

    // departure (session_depart.cpp)
    bool client_gone_ = false;        // the client left; nothing goes to it any more
    bool departure_error_ = false;    // it left through an error (counted unless explained)
    bool drain_timer_armed_ = false;  // limits.drain_timeout_ms runs
    bool client_eof_ = false;         // its socket reported EOF or an error
    bool client_may_read_ = false;    // socket clients' EOF: answers go to it until a send fails
    bool upstream_shut_ = false;      // shutdown(SHUT_WR) sent after the client's last byte
    bool upstream_refuses_ = false;   // Postgres closed its end: sending failed (EPIPE)
    bool upstream_eof_ = false;       // Postgres closed its end
    std::string departure_reason_;

    UniqueFd client_;
    ClientStream stream_;             // client_'s bytes, through TLS once started (socket clients)
    std::unique_ptr<ClientEnd> end_;  // the socket's, then the one the client upgraded to
    UniqueFd upstream_;
    UpstreamAddress upstream_address_;  // where upstream_'s server was reached
    UniqueFd passed_fd_;                // memfd received with an upgrade request

    EventPtr client_read_;
    EventPtr client_write_;
    EventPtr upstream_read_;
    EventPtr upstream_write_;
    EventPtr timer_;

    std::vector<std::byte> startup_;  // private copy of the startup packet being read
    protocol::MessageBoundaryTracker from_upstream_;  // where Postgres's messages end
    ByteQueue to_upstream_;  // bytes l5pgd itself sends Postgres: the startup packet

    // What the client's messages forwarded so far say about the server connection.
    struct ClientWalk {
        protocol::MessageBoundaryTracker tracker;
        // Query, Sync, FunctionCall: each answered by one 'Z' -- unless Postgres skips it
        // (after an error until Sync, a Sync in COPY IN); then the counts never meet and
        // the backend is not kept.
        uint64_t requests = 0;
        // Extended-protocol messages since the last Sync: an implicit transaction (a
        // suspended portal, an unsynced Execute) may be open although the last 'Z' said 'I'.
        bool unsynced = false;
        void see(char type) noexcept;
    };
    // Session pooling (session_pool.cpp): pooled sessions greet their client themselves,
    // hold back its Terminate and count requests against answers, so that a clean client's
    // server connection can be reset and kept.
    struct PoolState {
        bool pooled = false;
        std::string key;                                            // the StartupMessage's bytes
        std::unique_ptr<protocol::GreetingReader> greeting_reader;  // until a new backend's 'Z'
        protocol::ServerGreeting greeting;             // the server connection's, kept with it
        protocol::ParameterStatusFollower parameters;  // keeps `greeting` what Postgres last said
        ClientWalk from_client;                        // what went to Postgres
        ClientWalk walked;                    // before_terminate()'s walk, until it is sent
        std::vector<std::byte> client_chunk;  // the client's bytes, copied to be walked and sent
        uint64_t readies = 0;  // ReadyForQuery from Postgres (the greeting's not counted)
        std::chrono::steady_clock::time_point upstream_born;  // when the backend started
        uint64_t upstream_epoch = 0;    // the worker's upstream_epoch() when it was opened
        bool terminated = false;        // the client sent Terminate, which Postgres did not get
        bool terminate_queued = false;  // ... until the connection was not kept: queued for it
        std::unique_ptr<protocol::PoolReset> reset;  // running after a clean departure
        // A new backend's, before its client is greeted; a kept one's, before reuse.
        std::unique_ptr<protocol::PoolLoginCheck> login_check;
        // What a login of this role to this database took from pg_db_role_setting when the
        // backend started (its login check at the start); unknown: not kept.
        std::optional<std::string> role_settings;
        bool client_sent = false;  // some of the client's bytes went to Postgres
        // Before a new server connection is opened: until upstream_, a backend told to end,
        // is closed (reopen_after()), or the other workers had time to end one of theirs.
        enum class RoomWait : uint8_t { None, BackendEnding, OtherWorkers };
        RoomWait room_wait = RoomWait::None;
        int room_attempts = 0;       // make_room_for_login()'s, and how far they reached:
        bool room_took_kin = false;  // one of its role or its database (RoomMatch)
        bool room_took_any = false;  // one of any
    };
    PoolState pool_;

    RdmaPhase rdma_phase_ = RdmaPhase::None;
    bool wire_offered_ = false;  // wire_token_ is registered with the WireRegistry
    rdma::WireToken wire_token_{};
    rdma::Hello client_hello_;
    std::chrono::steady_clock::time_point wire_deadline_;
    std::chrono::microseconds wire_retry_{0};  // the next look for the wire connection
    EventPtr wire_timer_;
};

}  // namespace l5pg::daemon
