// Session pooling (pool.mode: session; upstream_pool.hpp says what is kept and when).
//
// A pooled session differs from a plain one in four places only:
//   1. Start: a kept server connection for the same StartupMessage is adopted, or a new one
//      is opened and l5pgd reads its greeting itself (protocol/server_greeting.hpp). Either
//      way l5pgd first asks the login check (protocol/pool_login_check.hpp): a kept
//      backend must pass it, a new one's answer notes the settings it started with. Then
//      the client gets AuthenticationOk, the ParameterStatus reports and a BackendKeyData
//      with a key of l5pgd's (cancel_keys.hpp), never the backend's.
//   2. Forwarding: the client's messages are walked as they go (one step per message) to
//      count the requests that Postgres answers with a ReadyForQuery, and to hold back its
//      Terminate, which would end the backend; Postgres's ParameterStatus reports update
//      the greeting kept for the next client (protocol/parameter_status_follower.hpp).
//   3. Departure: if the client sent Terminate, Postgres answered every request and is idle
//      outside a transaction, the connection is reset (protocol/pool_reset.hpp) instead of
//      shut; otherwise the session ends as a plain one does (session_depart.cpp).
//   4. Reset answered exactly: the connection goes to the worker's pool. Anything else, or
//      no answer within limits.drain_timeout_ms, closes it.
// The client's key is withdrawn before the reset: from then on it cancels nothing.
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/secure_random.hpp"
#include "daemon/session.hpp"
#include "daemon/worker.hpp"
#include "protocol/wire.hpp"

namespace l5pg::daemon {
namespace {

constexpr size_t kControlChunk = 8 * 1024;  // greeting and reset answers are small

// A cancel whose session ended this recently may still be on its way inside Postgres
// (CancelKeys::cancelled_within).
constexpr std::chrono::seconds kCancelSettles{5};

// One recv() of a short answer from Postgres into `chunk`: its bytes, or nothing for now
// (EAGAIN: empty and not ended), or the end of the connection (EOF or an error).
struct ControlRead {
    std::span<const std::byte> bytes;
    bool ended = false;
};
ControlRead read_control(int fd, std::span<std::byte> chunk) {
    for (;;) {
        const ssize_t n = ::recv(fd, chunk.data(), chunk.size(), MSG_DONTWAIT);
        if (n > 0)
            return {chunk.first(static_cast<size_t>(n)), false};
        if (n < 0 && errno == EINTR)
            continue;
        return {{}, !(n < 0 && errno == EAGAIN)};
    }
}

}  // namespace

// Not for the admin console (not Postgres), replication connections, or where l5pgd does
// not establish who the client is (passthrough: Postgres authenticates each connection, and
// a kept one would let the next client skip that).
bool Session::pool_applies(const protocol::StartupPacket& packet) const {
    if (worker_.config().pool.mode != config::PoolMode::Session || admin_ ||
        !l5pgd_identifies_client())
        return false;
    for (const auto& [key, value] : packet.parameters)
        if (key == "replication")
            return false;
    return true;
}

// Where this client's server connections are kept: its identity as l5pgd established it
// (the peer's uid, or a TCP client's address) and its StartupMessage. A backend keeps what
// DISCARD ALL leaves behind (a dblink or postgres_fdw connection made with a password,
// PL/Perl or PL/Python globals, a LOADed library): two OS users mapped to one role must not
// find each other's, which neither would get connecting directly.
std::string Session::pool_slot() const {
    return peer_.limit_key() + '\0' + pool_.key;
}

// A kept connection was opened at one of upstream.host's addresses. Clients that always find
// one never need a lookup of their own: each start refreshes the name's answer once it is
// older than upstream.dns_max_ttl_ms, in the background, as PgBouncer does (a login does not
// wait for DNS). An answer without an address kept connections were reached at (a failover
// by DNS) closes those idle there in every worker (LostAddresses) and keeps none more reached
// there; the client whose start asked may still get one, unless the answer was known at once.
void Session::start_pooled_upstream() {
    const config::UpstreamConfig& cfg = worker_.config().upstream;
    if (!cfg.host.empty())
        worker_.resolver().refresh(cfg.host, cfg.port,
                                   std::chrono::milliseconds(cfg.dns_max_ttl_ms));
    if (adopt_idle_upstream())
        return;
    pool_.greeting_reader = std::make_unique<protocol::GreetingReader>();
    open_upstream(std::as_bytes(std::span(pool_.key)));
}

bool Session::adopt_idle_upstream() {
    worker_.close_kept_at_lost_addresses();  // news this worker's loop has not taken up yet
    std::optional<UpstreamPool::Idle> idle = worker_.upstream_pool().take(pool_slot());
    if (!idle)
        return false;
    upstream_ = std::move(idle->fd);
    pool_.greeting = std::move(idle->greeting);
    pool_.upstream_born = idle->born;
    upstream_address_ = idle->address;
    if (!send_login_check(protocol::PoolLoginCheck::Purpose::BeforeReuse,
                          std::move(idle->role_settings))) {
        upstream_.reset();
        metrics_.pool_reuse_refused();
        spdlog::info(
            "session {}: kept server connection (backend pid {}) not reused: it "
            "could not be sent the login check",
            id_, pool_.greeting.key.backend_pid);
        return false;
    }
    watch_upstream();
    set_event(upstream_read_.get(), true);
    arm_timer(worker_.config().upstream.connect_timeout_ms);
    return true;
}

// The socket is idle and empty: the small request fits at once, or the connection is not
// usable.
bool Session::send_login_check(protocol::PoolLoginCheck::Purpose purpose,
                               std::string settings_at_start) {
    const std::vector<std::byte> request = protocol::PoolLoginCheck::request();
    const ssize_t n =
        ::send(upstream_.get(), request.data(), request.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n != static_cast<ssize_t>(request.size())) {
        if (n > 0)  // half a Query on its way: the connection is of no use (never seen)
            (void)::shutdown(upstream_.get(), SHUT_RDWR);
        return false;
    }
    pool_.login_check = std::make_unique<protocol::PoolLoginCheck>(
        record_->role, record_->database, purpose, std::move(settings_at_start));
    return true;
}

void Session::read_login_check_answer() {
    const bool at_start =
        pool_.login_check->purpose() == protocol::PoolLoginCheck::Purpose::AtStart;
    std::array<std::byte, kControlChunk> chunk;
    for (;;) {
        const ControlRead read = read_control(upstream_.get(), chunk);
        if (read.ended) {
            if (at_start) {
                // Part of the answer at most: the client gets its greeting, then the EOF.
                finish_start_check({});
                on_upstream_readable();
            } else {
                refuse_reuse("Postgres closed it");
            }
            return;
        }
        if (read.bytes.empty())
            return;
        const protocol::PoolLoginCheck::Status status =
            pool_.login_check->feed(read.bytes, pool_.greeting);
        if (status == protocol::PoolLoginCheck::Status::NeedMore)
            continue;
        const bool passed = status == protocol::PoolLoginCheck::Status::Passed;
        if (passed)
            pool_.role_settings = pool_.login_check->settings();
        if (at_start && !passed && !pool_.login_check->followed()) {
            // Not a Postgres answer (a broken frame, no end): the stream cannot be used.
            spdlog::warn("session {}: backend pid {}: {} in answer to l5pgd's login check", id_,
                         pool_.greeting.key.backend_pid, pool_.login_check->failure());
            abandon_upstream_before_greeting();
            return;
        }
        if (at_start) {
            if (!passed)
                spdlog::info(
                    "session {}: backend pid {} serves its client but will not be kept: its "
                    "login check at the start failed: {}",
                    id_, pool_.greeting.key.backend_pid, pool_.login_check->failure());
            const std::vector<std::byte> rest(pool_.login_check->rest().begin(),
                                              pool_.login_check->rest().end());
            finish_start_check(rest);
        } else if (!passed) {
            refuse_reuse(pool_.login_check->failure());
        } else if (client_left_unserved()) {
            // The backend, checked and untouched, goes back to the pool.
            pool_.login_check.reset();
            return_to_pool();
        } else {
            pool_.login_check.reset();
            metrics_.pool_reused();
            spdlog::debug("session {}: reusing the server connection of backend pid {}", id_,
                          pool_.greeting.key.backend_pid);
            on_upstream_connected();  // greets the client
        }
        return;
    }
}

// Whether the client closed its connection before it was greeted, having sent nothing
// after its StartupMessage. Its socket is not watched while the session connects: a peek
// looks for the EOF, which its end then reads as any departure (and finds any bytes before).
bool Session::client_left_unserved() {
    std::byte byte;
    if (!client_gone_ && ::recv(client_.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
        end_->on_socket_readable();
        std::span<const std::byte> staged;
        (void)end_->peek(staged);  // takes in what came before the EOF, then the EOF
    }
    return client_gone_ && !pool_.client_sent && end_->input_exhausted();
}

// The client, not greeted yet, gets a FATAL, as for a Postgres that cannot be reached; the
// backend is dropped. (The session is Forwarding already: it finishes as one whose Postgres
// left.)
void Session::abandon_upstream_before_greeting() {
    pool_.login_check.reset();
    end_with_fatal(protocol::kSqlstateConnectionFailure,
                   "l5pgd: the server's answer to l5pgd's login check could not be followed",
                   "login check at the start not followed");
}

// A new backend's own check was answered, or Postgres left: the client is greeted and gets
// what followed the answer.
void Session::finish_start_check(std::span<const std::byte> rest) {
    pool_.login_check.reset();
    greet_client_then(rest);
}

void Session::refuse_reuse(std::string_view why, bool answered) {
    metrics_.pool_reuse_refused();
    spdlog::info(
        "session {}: kept server connection (backend pid {}) not reused: {}; a new "
        "one is opened",
        id_, pool_.greeting.key.backend_pid, why);
    pool_.login_check.reset();
    if (answered)
        reopen_after(std::move(upstream_));
    else
        reopen_upstream();  // a backend that does not answer may not end on Terminate either
}

// Postgres refused the new backend with 53300 -- max_connections or its reserved slots, a
// role's or a database's CONNECTION LIMIT -- while l5pgd keeps idle backends, which a client
// connecting directly would not find in its way: the one most likely to make room ends
// (UpstreamPool::take_for_room()) and the login is tried again, a few times at most. A kept
// backend of the client's role and database helps whatever the limit was; one of its role
// only, or of its database only, helps under one limit; one of another role and database
// only under max_connections. The refusal does not say which limit it was in words l5pgd may
// read (they are translated), so one attempt at most ends a backend of each of the last two
// kinds. This worker's own is watched until Postgres has closed it; the other workers are
// asked to end one of theirs (RoomRequests), and the login waits longer at each attempt. Not
// for a client that left meanwhile, or whose bytes went to the refused backend (they cannot
// be sent again).
bool Session::make_room_for_login() {
    constexpr int kMaxRoomAttempts = 3;
    constexpr uint32_t kFirstRoomWaitMs = 25;  // then 100, 400
    (void)client_left_unserved();              // takes in an EOF the session has not read yet
    if (client_gone_ || upstream_refuses_ || upstream_shut_ || pool_.client_sent ||
        pool_.room_attempts >= kMaxRoomAttempts)
        return false;
    const PoolDirectory::Key owner{record_->database, record_->role};
    const std::optional<RoomMatch> match = room_match(owner);
    if (!match)
        return false;
    std::optional<UpstreamPool::Idle> idle = worker_.upstream_pool().take_for_room(owner, *match);
    ++pool_.room_attempts;
    enter(SessionState::Connecting);  // the client's bytes wait (pump())
    if (idle) {
        spdlog::info(
            "session {}: Postgres refused a new backend: too many connections; ending a kept "
            "one (backend pid {}) to make room",
            id_, idle->greeting.key.backend_pid);
        reopen_after(std::move(idle->fd));
        return true;
    }
    spdlog::info(
        "session {}: Postgres refused a new backend: too many connections; asking the other "
        "workers to end a kept one",
        id_);
    const uint32_t wait_ms = kFirstRoomWaitMs << (2 * (pool_.room_attempts - 1));
    worker_.room_requests().ask(
        owner, *match, std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms));
    drop_upstream();
    pool_.room_wait = PoolState::RoomWait::OtherWorkers;
    arm_timer(wait_ms);
    return true;
}

// How far make_room_for_login() may reach now (see there), given what l5pgd keeps.
std::optional<RoomMatch> Session::room_match(const PoolDirectory::Key& owner) {
    const PoolDirectory& kept = worker_.pools();
    if (kept.holds(owner))
        return RoomMatch::Owner;
    if (!pool_.room_took_kin && kept.holds_role_or_database(owner)) {
        pool_.room_took_kin = true;
        return RoomMatch::RoleOrDatabase;
    }
    if (!pool_.room_took_any && !kept.empty()) {
        pool_.room_took_any = true;
        return RoomMatch::Any;
    }
    return std::nullopt;
}

// Postgres frees a backend's slot (max_connections, CONNECTION LIMIT) before the backend
// closes its socket (its proc array entry goes in an on_shmem_exit callback, before the
// process ends), so the new connection is opened once the old one's EOF is read: opened at
// once, it could be refused for the slot the old one still holds, which a client
// reconnecting directly would not meet. upstream.connect_timeout_ms bounds the wait.
void Session::reopen_after(UniqueFd old_backend) {
    drop_upstream();
    upstream_ = std::move(old_backend);
    send_terminate(upstream_.get());
    pool_.room_wait = PoolState::RoomWait::BackendEnding;
    watch_upstream();
    set_event(upstream_read_.get(), true);
    arm_timer(worker_.config().upstream.connect_timeout_ms);
}

void Session::read_retiring() {
    std::array<std::byte, kControlChunk> chunk;
    for (;;) {
        const ControlRead read = read_control(upstream_.get(), chunk);
        if (read.ended) {
            reopen_upstream();
            return;
        }
        if (read.bytes.empty())
            return;
    }
}

void Session::reopen_upstream() {
    pool_.room_wait = PoolState::RoomWait::None;
    drop_upstream();
    evtimer_del(timer_.get());
    if (client_left_unserved()) {  // it gave up while the session waited
        close(departure_reason_ + " while l5pgd waited to log it in again", departure_error_);
        return;
    }
    to_upstream_.clear();  // nothing of the client's went to Postgres (make_room_for_login())
    pool_.upstream_epoch = worker_.upstream_epoch();  // a reload may have come meanwhile
    pool_.greeting = {};
    pool_.greeting_reader = std::make_unique<protocol::GreetingReader>();
    open_upstream(std::as_bytes(std::span(pool_.key)));
}

// A new backend's answer to the StartupMessage, copied out of the socket and parsed.
void Session::read_greeting() {
    std::array<std::byte, kControlChunk> chunk;
    for (;;) {
        const ControlRead read = read_control(upstream_.get(), chunk);
        if (read.ended) {
            // Postgres left mid-greeting: the client gets what it sent (a FATAL, typically),
            // then the EOF, as a plain session would.
            give_up_pooling(pool_.greeting_reader->take_bytes());
            read_upstream();
            return;
        }
        if (read.bytes.empty())
            return;
        switch (pool_.greeting_reader->feed(read.bytes)) {
            case protocol::GreetingReader::Status::NeedMore:
                continue;
            case protocol::GreetingReader::Status::NotPoolable:
                if (pool_.greeting_reader->too_many_connections() && make_room_for_login())
                    return;
                give_up_pooling(pool_.greeting_reader->take_bytes());
                return;
            case protocol::GreetingReader::Status::Complete: {
                pool_.greeting = pool_.greeting_reader->greeting();
                pool_.upstream_born = std::chrono::steady_clock::now();
                const std::vector<std::byte> rest(pool_.greeting_reader->rest().begin(),
                                                  pool_.greeting_reader->rest().end());
                pool_.greeting_reader.reset();
                // The settings the backend took from pg_db_role_setting are read before the
                // client is greeted, while nothing of its is on the way to Postgres: the
                // answer is then the first thing Postgres sends. A client that pipelined
                // requests behind its StartupMessage is served, its backend not kept.
                if (rest.empty() && !pool_.client_sent &&
                    send_login_check(protocol::PoolLoginCheck::Purpose::AtStart))
                    return;  // read_login_check_answer() greets the client
                greet_client_then(rest);
                return;
            }
        }
    }
}

// `rest`: answers to what a pipelining client sent already, or a FATAL that came after the
// greeting.
void Session::greet_client_then(std::span<const std::byte> rest) {
    greet_client();
    if (!rest.empty()) {
        note_from_upstream(rest);
        send_to_client(rest);
    }
}

void Session::greet_client() {
    note_logged_in();  // a new backend's complete greeting, or a kept backend's
    cancel_lease_ = worker_.cancel_keys().issue({pool_.greeting.key, upstream_address_});
    backend_key_ = pool_.greeting.key;
    if (record_)
        record_->backend_pid.store(pool_.greeting.key.backend_pid, std::memory_order_relaxed);
    const std::vector<std::byte> greeting = pool_.greeting.build(cancel_lease_.key());
    from_upstream_.feed(greeting);  // its ReadyForQuery answers no request of the client's
    send_to_client(greeting);
    note_idle();
    set_awaiting_upstream(false);
}

// Postgres asked for a password, refused, or said something else we do not keep: the
// client gets it as it came, and the session is a plain one from here on.
void Session::give_up_pooling(std::vector<std::byte> received) {
    spdlog::debug("session {}: not pooled: the server's greeting is not a plain one", id_);
    pool_.pooled = false;
    pool_.greeting_reader.reset();
    key_watcher_ = std::make_unique<protocol::BackendKeyWatcher>();
    if (!watch_for_key(received)) {  // pooling is never passthrough: for completeness
        refuse_unauthenticated_login();
        return;
    }
    note_from_upstream(received);
    send_to_client(received);
    set_awaiting_upstream(false);
}

void Session::ClientWalk::see(char type) noexcept {
    switch (type) {
        case 'Q':  // Query
        case 'F':  // FunctionCall
            ++requests;
            break;
        case 'S':  // Sync
            ++requests;
            unsynced = false;
            break;
        case 'P':  // Parse, Bind, Execute, Describe, Close, Flush
        case 'B':
        case 'E':
        case 'D':
        case 'C':
        case 'H':
            unsynced = true;
            break;
        default:  // CopyData, CopyDone, CopyFail belong to the request that began the COPY
            break;
    }
}

// Walks a copy of the client's bytes, never the shared memory or buffer they came from:
// a client that rewrote its ring between our walk and send() would make the counts lie.
// At most 64 KiB of them per round: an SHM peek shows up to half a ring (8 MiB), of which
// the upstream socket takes a few hundred KiB per round, and copying and walking all of it
// each round would cost the square of a record's size.
std::span<const std::byte> Session::copy_client_chunk(std::span<const std::byte> data) {
    constexpr size_t kMaxChunk = 64 * 1024;
    data = data.first(std::min(data.size(), kMaxChunk));
    pool_.client_chunk.assign(data.begin(), data.end());
    return pool_.client_chunk;
}

size_t Session::before_terminate(std::span<const std::byte> data) {
    pool_.walked = pool_.from_client;
    return pool_.walked.tracker.walk(data, [this](char type, size_t) {
        if (type == 'X')
            return false;
        pool_.walked.see(type);
        return true;
    });
}

// `sent` begins what before_terminate() walked (`walked` bytes of it).
void Session::note_forwarded(std::span<const std::byte> sent, size_t walked) {
    pool_.client_sent = true;
    if (sent.size() == walked) {
        pool_.from_client = pool_.walked;
        return;
    }
    (void)pool_.from_client.tracker.walk(sent, [this](char type, size_t) {
        pool_.from_client.see(type);
        return true;
    });
}

void Session::note_from_upstream(std::span<const std::byte> bytes) {
    const uint64_t readies = pool_.readies;
    const auto count_ready = [this](char type, size_t) {
        if (type == 'Z')
            ++pool_.readies;
        return true;
    };
    if (!pool_.pooled || pool_.greeting_reader) {
        (void)from_upstream_.walk(bytes, count_ready);
    } else {
        // The same walk keeps the greeting what Postgres last reported.
        (void)pool_.parameters.walk(from_upstream_, bytes, count_ready,
                                    [this](const std::string& name, const std::string& value) {
                                        pool_.greeting.set_parameter(name, value);
                                    });
    }
    if (pool_.readies != readies)
        note_idle();  // once per chunk, however many answers it ends (a pipeline's)
}

// Why this server connection cannot be kept, or nothing if it can: the client said goodbye
// after everything it sent, Postgres answered all of it and waits outside a transaction,
// and nothing else is under way on the connection. (A socket client whose EOF might be a
// half-close reads no more after a Terminate: the reset's answer never goes to it, see
// on_upstream_readable().)
std::optional<std::string_view> Session::pool_refusal() const {
    if (!pool_.terminated)
        return "the client left without a Terminate message";
    if (pool_.greeting_reader || pool_.login_check)
        return "the backend had not finished its start-up";
    if (!pool_.role_settings)
        return "the settings it started with are not known (see the session's first lines)";
    if (!upstream_.valid() || upstream_refuses_ || upstream_eof_ || upstream_shut_ ||
        !to_upstream_.empty() || finish_when_ != FinishWhen::Open)
        return "the server connection is closing";
    if (pool_.from_client.tracker.broken())
        return "the client's messages could not be followed";
    if (pool_.from_client.unsynced)
        return "extended-protocol messages after the last Sync";
    if (pool_.from_client.requests != pool_.readies || !from_upstream_.at_boundary())
        return "Postgres had not answered every request";
    if (pool_.parameters.broken())
        return "Postgres's ParameterStatus reports could not be followed";
    if (from_upstream_.ready_status() != 'I')
        return "the backend is inside a transaction";
    if (!pool_wanted())
        return "pooling is off now";
    if (!on_current_upstream())
        return "a reload pointed upstream.* elsewhere since it connected";
    return std::nullopt;
}

bool Session::try_pool_reset() {
    if (!pool_.pooled)
        return false;
    // A backend that is not kept keeps the client's key until the session ends, as a plain
    // session's does: a client that sent a Terminate behind a query it then cancels (a
    // driver's timeout: cancel, then close) still stops the query, as it would directly.
    if (const std::optional<std::string_view> refusal = pool_refusal()) {
        spdlog::debug("session {}: server connection not kept: {}", id_, *refusal);
        return false;
    }
    // One to be kept: the key cancels nothing from now on. Withdrawn before the last check,
    // so that a cancel that found it is on record as in flight (CancelKeys orders both).
    cancel_lease_ = CancelKeys::Lease();
    if (worker_.cancel_keys().cancelled_within(pool_.greeting.key, kCancelSettles)) {
        spdlog::debug(
            "session {}: server connection not kept: a cancel request for it is on its way, "
            "was sent in the last seconds, or was not seen taken by Postgres",
            id_);
        return false;
    }
    if (start_pool_reset())
        return true;
    spdlog::debug("session {}: server connection not kept: the reset could not be sent", id_);
    return false;
}

bool Session::on_current_upstream() const {
    return pool_.upstream_epoch == worker_.upstream_epoch();
}

// Not during SIGINT's drain: no new session could take the backend, which would only hold
// a slot of max_connections (or a CONNECTION LIMIT) that the l5pgd replacing this one, or a
// direct client, may need.
bool Session::pool_wanted() const {
    return worker_.config().pool.mode == config::PoolMode::Session &&
           worker_.pool_limits().max_idle > 0 && !worker_.draining();
}

// False if the reset could not be sent at once (the socket is nearly empty here: Postgres
// answered everything): the session then ends as a plain one.
bool Session::start_pool_reset() {
    pool_.reset = std::make_unique<protocol::PoolReset>(secure_random64());
    const std::vector<std::byte> request = pool_.reset->request();
    const ssize_t n =
        ::send(upstream_.get(), request.data(), request.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n != static_cast<ssize_t>(request.size())) {
        pool_.reset.reset();
        return false;
    }
    update_upstream_reading();
    return true;
}

void Session::read_reset_answer() {
    std::array<std::byte, kControlChunk> chunk;
    for (;;) {
        const ControlRead read = read_control(upstream_.get(), chunk);
        if (read.ended) {
            close(departure_reason_ + "; Postgres closed the server connection during its reset");
            return;
        }
        if (read.bytes.empty())
            return;
        switch (pool_.reset->feed(read.bytes, pool_.greeting)) {
            case protocol::PoolReset::Status::NeedMore:
                continue;
            case protocol::PoolReset::Status::Failed:
                spdlog::info(
                    "session {}: the reset of backend pid {} was not answered as "
                    "expected; the server connection is closed, not kept",
                    id_, pool_.greeting.key.backend_pid);
                close(departure_reason_ + "; server connection reset failed");
                return;
            case protocol::PoolReset::Status::Done:
                return_to_pool();
                return;
        }
    }
}

// A reload may have turned pooling off, or pointed upstream.* elsewhere, while the reset ran.
void Session::return_to_pool() {
    if (!pool_wanted() || !on_current_upstream() || worker_.address_retired(upstream_address_)) {
        close(departure_reason_ + "; server connection closed (pooling is off now, upstream.* " +
              "was changed, or upstream.host no longer has the address it was reached at)");
        return;
    }
    upstream_read_.reset();
    upstream_write_.reset();
    const auto pid = pool_.greeting.key.backend_pid;
    const bool kept = worker_.upstream_pool().park(
        pool_slot(), {record_->database, record_->role},
        UpstreamPool::Idle{std::move(upstream_), std::move(pool_.greeting), pool_.upstream_born,
                           std::move(*pool_.role_settings), upstream_address_},
        worker_.pool_limits());
    if (kept)
        metrics_.pool_returned();
    close(fmt::format("{}; server connection (backend pid {}) {}", departure_reason_, pid,
                      kept ? "kept for the next client" : "closed: its lifetime is over"));
}

}  // namespace l5pg::daemon
