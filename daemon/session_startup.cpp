// Startup phase: read one startup packet at a time (exactly its length, so nothing that
// follows it is consumed by accident), answer SSL/GSS requests with 'N', forward cancel
// requests, attach the shared memory of an L5 upgrade, and open the upstream connection
// for a StartupMessage.
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/client_auth.hpp"
#include "daemon/client_end_shm.hpp"
#include "daemon/log_format.hpp"
#include "daemon/session.hpp"
#include "daemon/upstream.hpp"
#include "daemon/worker.hpp"
#include "protocol/version_negotiation.hpp"
#include "protocol/wire.hpp"

namespace l5pg::daemon {
namespace {

// How many more bytes the packet in `buf` needs: its declared length once known.
size_t startup_bytes_wanted(const std::vector<std::byte>& buf) {
    if (buf.size() < 4)
        return 4 - buf.size();
    const uint32_t declared = protocol::read_be32(buf.data());
    if (declared < protocol::kMinStartupPacketLength ||
        declared > protocol::kMaxStartupPacketLength)
        return 0;  // invalid: let the parser say so
    return declared > buf.size() ? declared - buf.size() : 0;
}

}  // namespace

void Session::on_startup_readable() {
    for (;;) {
        // After an RDMA offer's Hello the socket is no longer read here: the client waits
        // for our answer (AwaitWire), then it carries doorbells (transport Rdma).
        if (state_ != SessionState::Startup || rdma_phase_ == RdmaPhase::AwaitWire ||
            transport_ == Transport::Rdma)
            return;
        if (stream_.tls() && !stream_.handshake_done()) {
            continue_tls_handshake();
            return;
        }
        const size_t before = startup_.size();
        if (!read_startup_from_socket() || startup_.size() == before)
            return;
        process_startup_input();
        // A socket announces its next bytes with the next readiness event; through TLS they
        // may already wait in OpenSSL's buffer, which nothing announces: read on.
        if (!stream_.tls())
            return;
    }
}

void Session::process_startup_input() {
    if (rdma_phase_ != RdmaPhase::AwaitHello) {
        process_startup_buffer();
        return;
    }
    if (startup_.size() == rdma::kHelloSize)
        on_rdma_hello();
}

// Returns false when the session was closed.
bool Session::read_startup_from_socket() {
    // After an RDMA offer the client's Hello comes next: exactly its size.
    const size_t want = rdma_phase_ == RdmaPhase::AwaitHello ? rdma::kHelloSize - startup_.size()
                                                             : startup_bytes_wanted(startup_);
    if (want == 0)
        return true;
    if (stream_.tls())
        return read_startup_from_tls(want);
    const size_t have = startup_.size();
    startup_.resize(have + want);
    wait::PassedFds passed;
    const ssize_t n =
        wait::recv_taking_fds(client_.get(), startup_.data() + have, want, MSG_DONTWAIT, passed);
    startup_.resize(have + (n > 0 ? static_cast<size_t>(n) : 0));
    if (!keep_upgrade_fd(passed))
        return false;
    if (n == 0) {
        close(have == 0 ? "client disconnected before startup"
                        : "client disconnected mid startup packet");
        return false;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
        close(fmt::format("client read error during startup: {}", std::strerror(errno)), true);
        return false;
    }
    return true;
}

// Through TLS: the rest of a record the packet began in is held by OpenSSL, not by the
// socket, so no readiness event would announce it: read until `want` bytes or EAGAIN.
bool Session::read_startup_from_tls(size_t want) {
    while (want > 0) {
        std::byte chunk[512];
        wait::PassedFds none;  // TLS is TCP only
        const ssize_t n = stream_.recv(chunk, std::min(want, sizeof chunk), none);
        if (n > 0) {
            startup_.insert(startup_.end(), chunk, chunk + n);
            want -= static_cast<size_t>(n);
            continue;
        }
        if (n < 0 && errno == EAGAIN)
            return true;
        if (n == 0 || errno == ECONNRESET) {
            close(startup_.empty() ? "client disconnected before startup"
                                   : "client disconnected mid startup packet");
            return false;
        }
        close(fmt::format("client read error during startup: {}", std::strerror(errno)), true);
        return false;
    }
    return true;
}

// Exactly the packet's bytes, copied out of the end (which another process writes) before
// they are parsed. Returns false when the session was closed.
bool Session::read_startup_from_end() {
    for (;;) {
        const size_t want = startup_bytes_wanted(startup_);
        if (want == 0)
            return true;
        std::span<const std::byte> data;
        if (end_->peek(data) != IoStatus::Ok)
            return state_ != SessionState::Closed;
        const size_t n = std::min(want, data.size());
        startup_.insert(startup_.end(), data.begin(), data.begin() + static_cast<ptrdiff_t>(n));
        end_->consume(n);
    }
}

bool Session::drain_startup() {
    bool progress = false;
    while (state_ == SessionState::Startup) {
        const size_t before = startup_.size();
        if (!read_startup_from_end() || startup_.size() == before)
            break;
        progress = true;
        process_startup_buffer();
    }
    return progress;
}

void Session::process_startup_buffer() {
    const protocol::StartupParse parse = protocol::parse_startup_packet(startup_);
    if (parse.status == protocol::ParseStatus::NeedMore)
        return;
    if (parse.status == protocol::ParseStatus::Invalid) {
        reject_startup_packet(parse);
        return;
    }
    const size_t length = parse.packet.length;
    handle_startup_packet(parse.packet, length);
}

// As Postgres ends a cancel connection: no answer, the connection closes.
void Session::refuse_cancel(CancelOutcome outcome, std::string_view why) {
    metrics_.cancel_request(outcome);
    client_logs().cancel_refused.log(spdlog::level::info,
                                     "session {}: cancel request from {} not forwarded: {}", id_,
                                     peer_.describe(), why);
    close(fmt::format("cancel request not forwarded: {}", why));
}

void Session::reject_startup_packet(const protocol::StartupParse& parse) {
    metrics_.startup_rejected();
    client_logs().startup_rejected.log(spdlog::level::info,
                                       "session {}: invalid startup packet from {}: {}", id_,
                                       peer_.describe(), parse.error);
    fail_startup(parse.sqlstate, parse.error, "invalid startup packet");
}

// Postgres answers one SSLRequest and one GSSENCRequest per connection (ProcessStartupPacket's
// ssl_done and gss_done) and refuses a repeat; l5pgd answers two SSLRequests, the shim's own
// before its upgrade request (clientlib/upgrade_rdma.cpp) and the program's, one
// GSSENCRequest and one upgrade request, and refuses more as Postgres does. Without a bound a
// client could have l5pgd answer 'N' for ever: a worker kept in its startup loop, and the
// answers queued for a client that never reads them.
bool Session::within_request_limits(const protocol::StartupPacket& packet) {
    const auto take = [](uint8_t& count, uint8_t limit) { return count < limit && ++count; };
    bool within = true;
    switch (packet.kind) {
        case protocol::StartupKind::SslRequest:
            within = take(requests_.ssl, 2);
            break;
        case protocol::StartupKind::GssEncRequest:
            within = take(requests_.gss_enc, 1);
            break;
        case protocol::StartupKind::L5Upgrade:
            within = take(requests_.upgrade, 1);
            break;
        default:
            break;
    }
    if (!within)
        reject_startup_packet(protocol::unsupported_protocol(packet.code));
    return within;
}

// An upgrade request carries one descriptor, its memfd (the shim sends it with the
// packet's first bytes); any other is foreign_fds.hpp's.
bool Session::keep_upgrade_fd(wait::PassedFds& passed) {
    if (passed.count == 1 && !passed_fd_.valid()) {
        passed_fd_.reset(passed.fds[0]);
        passed.count = 0;
        return true;
    }
    if (passed.count == 0)
        return true;
    client_passed_fds(passed);
    return false;
}

void Session::handle_startup_packet(const protocol::StartupPacket& packet, size_t length) {
    using protocol::StartupKind;
    if (packet.kind != StartupKind::L5Upgrade && passed_fd_.valid()) {
        wait::PassedFds passed;
        passed.fds[passed.count++] = passed_fd_.release();
        client_passed_fds(passed);
        return;
    }
    if (!within_request_limits(packet))
        return;
    switch (packet.kind) {
        case StartupKind::SslRequest:
            if (can_start_tls()) {
                startup_.clear();
                start_tls();
                return;
            }
            [[fallthrough]];
        case StartupKind::GssEncRequest: {
            // No TLS/GSS encryption in l5pgd yet: like a Postgres without it, say 'N' and
            // let the client continue in plaintext (or give up if it requires it).
            startup_.clear();
            const std::byte no{'N'};
            send_to_client({&no, 1});
            return;
        }
        case StartupKind::L5Upgrade:
            handle_upgrade(packet);
            return;
        case StartupKind::CancelRequest:
            // No role is involved, only a key of a session l5pgd serves
            // (session_cancel.cpp). Where l5pgd serves no client (auth.*: reject), nothing
            // reaches Postgres: as for a wrong key, the client only sees the connection close.
            startup_slot_.release();
            if (worker_.admission().auth.method_for(peer_.local) == config::AuthMethod::Reject) {
                refuse_cancel(CancelOutcome::Rejected,
                              fmt::format("{} is reject", peer_.local ? "auth.local" : "auth.tcp"));
                return;
            }
            if (!look_up_cancel_key(packet))
                return;
            begin_upstream({startup_.data(), length}, /*cancel=*/true);
            return;
        case StartupKind::Startup: {
            startup_slot_.release();
            // Before any other answer, a refusal too, as Postgres sends it
            // (protocol/version_negotiation.hpp).
            const std::optional<protocol::ProtocolDowngrade> downgrade =
                protocol::downgrade_to_3_0(packet);
            if (downgrade)
                send_to_client(downgrade->negotiate);
            // The console stays open through SIGINT's drain: SHOW SESSIONS tells what it
            // waits for.
            if (worker_.draining() && !is_admin_database(protocol::login_database(packet))) {
                refuse_startup(ConnectionRefusal::ShuttingDown, protocol::kSqlstateCannotConnectNow,
                               "l5pgd is shutting down");
                return;
            }
            if (!has_session_place()) {
                refuse_startup(ConnectionRefusal::MaxSessions,
                               protocol::kSqlstateTooManyConnections,
                               too_many_connections_message(ConnectionRefusal::MaxSessions));
                return;
            }
            if (admit_startup(packet)) {
                pool_.pooled = pool_applies(packet);
                begin_upstream(downgrade ? std::span<const std::byte>(downgrade->startup)
                                         : std::span<const std::byte>(startup_.data(), length),
                               /*cancel=*/false);
            }
            return;
        }
    }
}

// The connection's one upgrade request (within_request_limits()): the session is on its
// socket still.
void Session::handle_upgrade(const protocol::StartupPacket& packet) {
    if (packet.upgrade.transport == protocol::L5Transport::Rdma) {
        handle_rdma_upgrade(packet.upgrade);
        return;
    }
    startup_.clear();
    std::unique_ptr<ClientEnd> shm_end;
    std::optional<std::string> refusal = try_attach(packet.upgrade, shm_end);
    worker_.foreign_fds().close_later(std::move(passed_fd_));  // a refused one's
    // Through TLS if a TCP client asked for shared memory inside it (declined).
    const std::byte answer = refusal ? protocol::kL5Declined : protocol::kL5Accepted;
    if (!send_now({&answer, 1})) {
        close("cannot answer the upgrade request", true);
        return;
    }
    if (refusal) {
        metrics_.upgrade_declined();
        client_logs().upgrade_declined.log(spdlog::level::info, "session {}: upgrade declined: {}",
                                           id_, *refusal);
        return;
    }
    metrics_.upgrade_accepted();
    transport_ = Transport::Shm;
    switch_end(std::move(shm_end));
    spdlog::debug("session {}: upgraded to shared memory (rings {} / {} bytes)", id_,
                  packet.upgrade.c2s_ring_size, packet.upgrade.s2c_ring_size);
}

std::optional<std::string> Session::try_attach(const protocol::L5UpgradeRequest& req,
                                               std::unique_ptr<ClientEnd>& end) {
    const config::ShmConfig& cfg = worker_.config().shm;
    if (transport_ != Transport::Unix)
        return "shared memory needs the Unix socket listener";
    if (!cfg.enabled)
        return "shm.enabled is false";
    // No client on the Unix socket is served: attach nothing for it (its StartupMessage,
    // sent over the socket after the decline, is refused with 28000).
    if (worker_.admission().auth.local == config::AuthMethod::Reject)
        return "auth.local is reject";
    if (req.transport != protocol::L5Transport::Shm)
        return "transport not supported";
    if (!passed_fd_.valid())
        return "no memfd was passed with the request";
    if (req.c2s_ring_size > cfg.max_ring_size || req.s2c_ring_size > cfg.max_ring_size)
        return fmt::format("ring size above shm.max_ring_size ({})", cfg.max_ring_size);
    // Last: a place is held from here on (its StartupMessage would be refused: no rings).
    if (!has_session_place())
        return "limits.max_sessions reached";
    SegmentRegistry::Refusal taken;
    std::optional<SegmentRegistry::Claim> claim =
        worker_.segments().claim(passed_fd_.get(), id_, taken);
    if (!claim)
        return taken.holder != 0
                   ? fmt::format("the memfd is already attached to session {}", taken.holder)
                   : fmt::format("the passed descriptor is not a usable memfd ({}: {})", taken.call,
                                 std::strerror(taken.err));
    shm::SysError error;
    std::optional<shm::Segment> segment =
        shm::Segment::attach(passed_fd_.release(), req.c2s_ring_size, req.s2c_ring_size, error);
    if (!segment)
        return fmt::format("cannot attach the shared memory: {}{}{}", error.what,
                           error.err ? ": " : "", error.err ? std::strerror(error.err) : "");
    end = std::make_unique<ShmClientEnd>(std::move(*segment), std::move(*claim), client_.get(),
                                         *this, metrics_, peer_.pid, worker_.doorbells());
    return std::nullopt;
}

bool Session::can_start_tls() const noexcept {
    return transport_ == Transport::Tcp && worker_.admission().tls && !stream_.tls() &&
           rdma_phase_ == RdmaPhase::None;
}

// 'S' goes out in plaintext: the socket's buffer is empty at this point of the startup, so
// one send() takes it. Postgres refuses bytes buffered behind an SSLRequest (CVE-2021-23214);
// here they reach OpenSSL as handshake bytes and fail it.
void Session::start_tls() {
    const std::byte yes{'S'};
    if (::send(client_.get(), &yes, 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1) {
        close("cannot answer the SSLRequest");
        return;
    }
    SslPtr ssl = worker_.admission().tls->accept_on(client_.get());
    if (!ssl) {
        close("cannot start TLS: " + tls_error_text(), true);
        return;
    }
    stream_.start_tls(std::move(ssl));
    continue_tls_handshake();
}

void Session::continue_tls_handshake() {
    std::string error;
    switch (stream_.handshake(error)) {
        case ClientStream::Handshake::Pending:
            // Watch for what OpenSSL waits for, and only that: while it cannot send its
            // flight (a client that does not read), bytes or an EOF from the client keep a
            // level-triggered read event firing on every loop round, till the startup timeout.
            set_event(client_write_.get(), stream_.wants_write());
            set_event(client_read_.get(), !stream_.wants_write());
            return;
        case ClientStream::Handshake::Failed:
            close("TLS handshake failed: " + error);
            return;
        case ClientStream::Handshake::Done:
            set_event(client_write_.get(), false);
            set_event(client_read_.get(), true);
            spdlog::debug("session {}: TLS established", id_);
            on_startup_readable();  // the StartupMessage may be buffered already
            return;
    }
}

namespace {

constexpr std::chrono::milliseconds kFirstConnectRetry{2};
constexpr std::chrono::milliseconds kMaxConnectRetry{100};

}  // namespace

bool Session::is_admin_database(std::string_view database) const {
    const std::string& console = worker_.admission().admin.database;
    return !console.empty() && database == console;
}

// The console shows every session's client and role: only roles in admin.users (which may
// also RELOAD) or admin.stats_users (which may only read), and only where l5pgd itself
// established who the client is (peer or trust, not passthrough, where Postgres would have
// checked a password the console never asks for).
AuthVerdict Session::admit_to_console(std::string_view role) {
    const config::AdminConfig& admin = worker_.admission().admin;
    const auto listed = [&](const std::vector<std::string>& roles) {
        return std::find(roles.begin(), roles.end(), role) != roles.end();
    };
    if (!l5pgd_identifies_client())
        return AuthVerdict{AuthFailure::AdminConsole,
                           "l5pgd: the admin console needs l5pgd to identify the client "
                           "(rule auth.local/auth.tcp=passthrough)"};
    if (!listed(admin.users) && !listed(admin.stats_users))
        return AuthVerdict{AuthFailure::AdminConsole,
                           fmt::format("l5pgd: role {} may not use the admin console (rule "
                                       "admin.users, admin.stats_users)",
                                       quoted_name(role))};
    admin_ = true;
    console_place_ = worker_.consoles().try_take(1, std::numeric_limits<uint64_t>::max());
    admin_may_reload_ = listed(admin.users);
    return AuthVerdict{};
}

bool Session::l5pgd_identifies_client() const {
    return config::AuthConfig::l5pgd_identifies(worker_.admission().auth.method_for(peer_.local));
}

void Session::publish_record(std::string_view role, std::string_view database) {
    auto record = std::make_shared<SessionRecord>();
    record->id = id_;
    record->transport = transport_;
    record->client = peer_.describe();
    record->database = std::string(database);
    record->role = std::string(role);
    record->connected_at = std::chrono::system_clock::now();
    record->connected = std::chrono::steady_clock::now();
    record->note_activity(record->connected);
    record_ = record;
    worker_.sessions().add(std::move(record));
}

// From Postgres's acceptance of the login on (its first ReadyForQuery, or a kept backend's
// greeting), the session counts under its database and role (metrics.labels): what exists,
// not what a client asked for, makes series.
void Session::note_logged_in() {
    if (login_noted_ || !record_)
        return;
    login_noted_ = true;
    if (record_->database.empty())
        return;  // physical replication: no database
    database_counters_ = metrics_.databases().counters_for(record_->database, record_->role);
    if (database_counters_ != nullptr)
        database_counters_->opened();
}

bool Session::has_session_place() {
    if (!session_place_.held())
        session_place_ = worker_.session_cap().try_take(1, worker_.config().limits.max_sessions);
    return session_place_.held();
}

// As Postgres in smart shutdown or over max_connections answers a StartupMessage (its
// CancelRequests still pass).
void Session::refuse_startup(ConnectionRefusal refusal, std::string_view sqlstate,
                             std::string_view message) {
    metrics_.connection_refused(refusal);
    client_logs().refused_connection.log(spdlog::level::warn, "session {}: refused {} over {}: {}",
                                         id_, peer_.describe(), to_string(transport_), message);
    fail_startup(sqlstate, message, to_string(refusal));
}

// Under passthrough Postgres said AuthenticationOk without asking anything: pg_hba.conf
// trusts l5pgd's own connection, so the client would get any role it names. Nothing of the
// login reached the client.
void Session::refuse_unauthenticated_login() {
    metrics_.auth_failed(transport_, AuthFailure::UpstreamDidNotAuthenticate);
    client_logs().auth_refused.log(  // a client can cause it at will: rate-limited
        spdlog::level::err,
        "session {}: refused {} over {} (role {}): Postgres accepted the login without "
        "asking for a password, but auth.{} is passthrough: make pg_hba.conf require one for "
        "l5pgd's connections",
        id_, peer_.describe(), to_string(transport_), quoted_name(record_ ? record_->role : ""),
        peer_.local ? "local" : "tcp");
    key_watcher_.reset();
    end_with_fatal(protocol::kSqlstateInvalidAuthorization,
                   "l5pgd: PostgreSQL accepted the login without authenticating the client (auth "
                   "passthrough needs pg_hba.conf to require a password)",
                   "upstream did not authenticate");
}

// Forwarding already (Postgres answered), before anything of Postgres's reached the client:
// ended as when Postgres closes, with a FATAL of l5pgd's as the last message.
void Session::end_with_fatal(std::string_view sqlstate, std::string_view message,
                             std::string reason) {
    drop_upstream();
    finish_after_client_flush(std::move(reason));
    send_to_client(protocol::build_fatal(sqlstate, message));
}

void Session::drop_upstream() {
    upstream_read_.reset();
    upstream_write_.reset();
    upstream_.reset();
}

bool Session::admit_startup(const protocol::StartupPacket& packet) {
    const std::string_view role = protocol::startup_parameter(packet, "user");
    // Postgres's reading: the role's name when empty, none for physical replication.
    const std::string_view database = protocol::login_database(packet);
    AuthRequest request{peer_.local, peer_.uid, {}, role};
    if (peer_.local)
        request.os_user = os_user_name(peer_.uid);
    const Admission& admission = worker_.admission();
    AuthVerdict verdict = check_client(admission.auth, admission.ident, request);
    if (verdict.allowed() && transport_ == Transport::Tcp && !stream_.tls() &&
        admission.tls_mode == config::TlsMode::Require)
        verdict = AuthVerdict{AuthFailure::TlsRequired,
                              "l5pgd: SSL required for TCP clients (rule tls.mode=require)"};
    if (verdict.allowed() && is_admin_database(database))
        verdict = admit_to_console(role);
    if (verdict.allowed()) {
        spdlog::info("session {}: login: role {} database {} from {} over {}{}", id_,
                     quoted_name(role), quoted_name(database), peer_.describe(),
                     to_string(transport_), admin_ ? " (admin console)" : "");
        publish_record(role, database);
        passthrough_login_ =
            admission.auth.method_for(peer_.local) == config::AuthMethod::Passthrough && !admin_;
        return true;
    }
    metrics_.auth_failed(transport_, verdict.failure);
    client_logs().auth_refused.log(spdlog::level::warn,
                                   "session {}: refused {} over {} (role {} database {}): {}", id_,
                                   peer_.describe(), to_string(transport_), quoted_name(role),
                                   quoted_name(database), verdict.message);
    fail_startup(protocol::kSqlstateInvalidAuthorization, verdict.message, "client refused");
    return false;
}

void Session::begin_upstream(std::span<const std::byte> first_bytes, bool cancel) {
    cancel_request_ = cancel;
    enter(SessionState::Connecting);
    if (pool_.pooled) {
        pool_.key.assign(reinterpret_cast<const char*>(first_bytes.data()), first_bytes.size());
        pool_.upstream_epoch = worker_.upstream_epoch();
        startup_.clear();
        start_pooled_upstream();
        return;
    }
    if (!cancel && !admin_)
        key_watcher_ = std::make_unique<protocol::BackendKeyWatcher>();
    open_upstream(first_bytes);
    startup_.clear();
}

void Session::open_upstream(std::span<const std::byte> startup) {
    to_upstream_.append(startup);
    dial_.addresses.reset();
    connect_upstream();
}

namespace {

wait::Deadline connect_deadline(const config::UpstreamConfig& cfg) {
    return wait::Deadline::after(std::chrono::milliseconds(cfg.connect_timeout_ms));
}

}  // namespace

// Where Postgres is: the Unix socket, or upstream.host's addresses, looked up by the
// worker's resolver while the session waits (its timer bounds the lookup).
void Session::connect_upstream() {
    if (admin_) {
        open_admin_console();
        return;
    }
    const config::UpstreamConfig& cfg = worker_.config().upstream;
    dial_.deadline = connect_deadline(cfg);
    if (dial_.pinned) {
        on_upstream_lookup(
            std::make_shared<const UpstreamAddresses>(UpstreamAddresses{{*dial_.pinned}, {}}));
        return;
    }
    if (cfg.host.empty()) {
        on_upstream_lookup(std::make_shared<const UpstreamAddresses>(unix_upstream(cfg)));
        return;
    }
    UpstreamResolver::Answer known =
        worker_.resolver().lookup(cfg.host, cfg.port, std::chrono::milliseconds(cfg.dns_max_ttl_ms),
                                  dial_.lookup, [this](UpstreamResolver::Answer answer) {
                                      evtimer_del(timer_.get());
                                      on_upstream_lookup(std::move(answer));
                                      continue_departure();
                                  });
    if (known)
        on_upstream_lookup(std::move(known));
    else
        arm_timer_until(dial_.deadline);
}

void Session::on_upstream_lookup(UpstreamResolver::Answer addresses) {
    if (!addresses->lookup_failure.empty()) {
        fail_upstream_connect(EHOSTUNREACH, addresses->lookup_failure);
        return;
    }
    dial_.addresses = std::move(addresses);
    dial_.current = 0;
    dial_.deadline = connect_deadline(worker_.config().upstream);  // the lookup's time is over
    dial_.retry_delay = kFirstConnectRetry;
    connect_to_address();
}

// One connect attempt. A Unix socket whose listen queue is full answers EAGAIN at once
// (many clients connecting together): retry with a growing delay until the deadline,
// as a TCP connect would wait in the kernel's SYN queue.
void Session::connect_to_address() {
    UpstreamConnect attempt = start_upstream_connect(dial_.addresses->list.at(dial_.current));
    if (!attempt.fd.valid()) {
        if (attempt.error == EAGAIN && dial_.retry_delay.count() < dial_.deadline.poll_ms()) {
            arm_timer(static_cast<uint32_t>(dial_.retry_delay.count()));
            dial_.retry_delay = std::min(dial_.retry_delay * 2, kMaxConnectRetry);
            return;
        }
        next_upstream_address(attempt.error);
        return;
    }
    upstream_ = std::move(attempt.fd);
    watch_upstream();
    if (attempt.in_progress) {
        arm_timer_until(dial_.deadline);
        set_event(upstream_write_.get(), true);
        return;
    }
    on_upstream_connected();
}

// A pending TCP connect became writable: connected, or refused (or its time ran out:
// timer_cb) and the next address is tried.
void Session::finish_connect_attempt() {
    if (const int err = finish_upstream_connect(upstream_.get()); err != 0) {
        next_upstream_address(err);
        return;
    }
    on_upstream_connected();
}

// As libpq, each address in turn until one connects: "localhost" may be ::1 where
// Postgres listens on 127.0.0.1 only, and a name may list a host that is down. Each
// failure is logged: a dead first address costs every new connection its timeout.
void Session::next_upstream_address(int err) {
    drop_upstream();
    if (!dial_.addresses || dial_.current + 1 >= dial_.addresses->list.size()) {
        fail_upstream_connect(err);
        return;
    }
    const config::UpstreamConfig& cfg = worker_.config().upstream;
    client_logs().upstream_failed.log(
        spdlog::level::warn,
        "session {}: upstream connect to {} ({}) failed: {}; trying the next address", id_,
        describe_upstream(cfg), describe_address(dial_.addresses->list[dial_.current]),
        err == 0 ? "timeout expired" : std::strerror(err));
    ++dial_.current;
    dial_.deadline = connect_deadline(cfg);
    dial_.retry_delay = kFirstConnectRetry;
    connect_to_address();
}

// The console answers over a socket pair, in place of Postgres. Failing to open one (out
// of descriptors) says nothing about Postgres: not an upstream connect failure.
void Session::open_admin_console() {
    UniqueFd console = worker_.admin_console().open(admin_may_reload_);
    if (!console.valid()) {
        const int err = errno;
        client_logs().session_error.log(spdlog::level::warn,
                                        "session {}: could not open the admin console: {}", id_,
                                        std::strerror(err));
        fail_startup(protocol::kSqlstateInsufficientResources,
                     fmt::format("l5pgd: could not open the admin console: {}", std::strerror(err)),
                     "admin console not opened");
        return;
    }
    upstream_ = std::move(console);
    watch_upstream();
    on_upstream_connected();
}

void Session::watch_upstream() {
    event_base* base = worker_.base();
    upstream_read_.reset(
        event_new(base, upstream_.get(), EV_READ | EV_PERSIST, upstream_read_cb, this));
    upstream_write_.reset(
        event_new(base, upstream_.get(), EV_WRITE | EV_PERSIST, upstream_write_cb, this));
}

void Session::on_upstream_connected() {
    if (const int err = finish_upstream_connect(upstream_.get()); err != 0) {
        fail_upstream_connect(err);  // a kept backend, or the console's socket pair
        return;
    }
    evtimer_del(timer_.get());
    set_event(upstream_write_.get(), false);
    if (dial_.addresses)  // not for a kept backend (its own) or the console's socket pair
        upstream_address_ = dial_.addresses->list.at(dial_.current);
    enter(SessionState::Forwarding);
    if (!cancel_request_) {
        if (!std::exchange(counted_, true))  // not again after make_room_for_login()
            metrics_.session_opened(transport_);
        update_upstream_reading();
        if (pool_.pooled && !pool_.greeting_reader)
            greet_client();  // a kept server connection: Postgres says nothing now
    } else {
        metrics_.cancel_request(CancelOutcome::Forwarded);
        finish_after_upstream_close("cancel request forwarded");
    }
    flush_upstream();
    // Bytes a TLS client sent in the StartupMessage's record wait in OpenSSL, where no
    // readiness event announces them (the socket end looks there too); an upgraded client
    // may have published its first query already.
    if (state_ == SessionState::Forwarding && !cancel_request_)
        (void)pump();
}

// The client learns that Postgres could not be reached and why, not where it lives (the
// socket path or address is for the operator's log).
void Session::fail_upstream_connect(int err, std::string_view lookup_failure) {
    metrics_.upstream_connect_failed();
    const std::string why =
        !lookup_failure.empty()
            ? fmt::format("could not translate the host name to an address: {}", lookup_failure)
        : err == 0 ? "timeout expired"
                   : std::strerror(err);
    // Which of a name's addresses (an address or a socket path says it already).
    const config::UpstreamConfig& cfg = worker_.config().upstream;
    const bool named = dial_.addresses && dial_.current < dial_.addresses->list.size() &&
                       !cfg.host.empty() &&
                       describe_address(dial_.addresses->list[dial_.current]) != cfg.host;
    const std::string where =
        named ? fmt::format(" ({})", describe_address(dial_.addresses->list[dial_.current]))
              : std::string();
    // A cancel dials where its backend is, which upstream.* may no longer name.
    const std::string target = dial_.pinned
                                   ? fmt::format("{} (the server of the backend to cancel)",
                                                 describe_address(*dial_.pinned))
                                   : describe_upstream(cfg) + where;
    client_logs().upstream_failed.log(
        spdlog::level::warn, "session {}: upstream connect to {} failed: {}", id_, target, why);
    fail_startup(protocol::kSqlstateConnectionFailure,
                 fmt::format("l5pgd: could not connect to the PostgreSQL server: {}", why),
                 "upstream connect failed");
}

// The caller has logged why (rate-limited, with the details); `reason` is the short close
// reason for the debug log.
void Session::fail_startup(std::string_view sqlstate, std::string_view message,
                           std::string_view reason) {
    if (cancel_request_) {            // libpq ignores the cancel connection's outcome
        cancel_in_flight_.confirm();  // not connected: the request never reached Postgres
        close(reason);
        return;
    }
    const std::vector<std::byte> error = protocol::build_fatal(sqlstate, message);
    session_place_.release();  // not served: its place is free while the FATAL goes out
    // A client that does not take its FATAL does not keep the session (timer_cb): the
    // startup timer still runs before Postgres is asked; connecting to it used the timer.
    if (state_ == SessionState::Connecting)
        arm_timer(worker_.config().limits.startup_timeout_ms);
    enter(SessionState::Refusing);
    drop_upstream();
    finish_after_client_flush(std::string(reason));
    send_to_client(error);
}

}  // namespace l5pg::daemon
