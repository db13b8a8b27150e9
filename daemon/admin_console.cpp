#include "daemon/admin_console.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/admin_query.hpp"
#include "l5pg_version.hpp"
#include "protocol/backend_messages.hpp"
#include "protocol/error_response.hpp"
#include "protocol/framing.hpp"
#include "protocol/startup.hpp"
#include "protocol/wire.hpp"

namespace l5pg::daemon {
namespace {

// A console query is a short command: anything longer is not one of ours.
constexpr uint32_t kMaxConsoleMessage = 64 * 1024;
// Answers not yet taken by the session: past this the console stops reading queries until
// they are, as Postgres stops reading while its writes block (a client that sends and
// never reads would otherwise make l5pgd buffer without end).
constexpr size_t kMaxPendingOutput = 256 * 1024;

// What libpq and psql read from a server at login.
void greet(protocol::BackendWriter& out) {
    out.authentication_ok();
    out.parameter_status("server_version", "15.0 (l5pgd " L5PG_VERSION " admin console)");
    out.parameter_status("server_encoding", "UTF8");
    out.parameter_status("client_encoding", "UTF8");
    out.parameter_status("DateStyle", "ISO, MDY");
    out.parameter_status("integer_datetimes", "on");
    out.parameter_status("standard_conforming_strings", "on");
    out.ready_for_query();
}

bool is_extended_protocol(char type) {
    return std::string_view("PBDECH").find(type) != std::string_view::npos;
}

// CopyData, CopyDone and CopyFail outside a COPY: Postgres ignores them (a client may still
// be sending after a COPY failed).
bool is_copy_message(char type) {
    return std::string_view("dcf").find(type) != std::string_view::npos;
}

// A Query's string: NUL-terminated, with no NUL before the end (Postgres's pq_getmsgstring
// and pq_getmsgend refuse anything else).
std::optional<std::string_view> query_string(std::span<const std::byte> body) {
    const auto* text = reinterpret_cast<const char*>(body.data());
    const std::string_view all(text, body.size());
    if (all.empty() || all.find('\0') != all.size() - 1)
        return std::nullopt;
    return all.substr(0, all.size() - 1);
}

}  // namespace

struct AdminConsole::Connection {
    AdminConsole* console = nullptr;
    UniqueFd fd;
    EventPtr read;
    EventPtr write;
    std::vector<std::byte> in;
    std::vector<std::byte> out;
    bool may_reload = false;                // admin.users, not only admin.stats_users
    bool started = false;                   // the StartupMessage was answered
    bool skipping_extended = false;         // an extended-protocol message was refused: until Sync
    bool closing = false;                   // end once `out` is written
    std::optional<uint64_t> reload_ticket;  // a RELOAD waits for its reload's outcome
};

AdminConsole::AdminConsole(event_base* base, std::function<AdminView()> view)
    : base_(base), view_(std::move(view)) {}

AdminConsole::~AdminConsole() = default;

UniqueFd AdminConsole::open(bool may_reload) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) != 0)
        return UniqueFd{};
    UniqueFd session_end(pair[0]);
    auto c = std::make_unique<Connection>();
    c->console = this;
    c->may_reload = may_reload;
    c->fd.reset(pair[1]);
    c->read.reset(event_new(base_, c->fd.get(), EV_READ | EV_PERSIST, read_cb, c.get()));
    c->write.reset(event_new(base_, c->fd.get(), EV_WRITE | EV_PERSIST, write_cb, c.get()));
    if (!c->read || !c->write || event_add(c->read.get(), nullptr) != 0) {
        errno = ENOMEM;
        return UniqueFd{};
    }
    const Connection* key = c.get();
    connections_.emplace(key, std::move(c));
    return session_end;
}

void AdminConsole::read_cb(int, short, void* arg) {
    auto* c = static_cast<Connection*>(arg);
    c->console->on_readable(*c);
}

void AdminConsole::write_cb(int, short, void* arg) {
    auto* c = static_cast<Connection*>(arg);
    c->console->flush(*c);
}

// Reads and answers what the session sent, a chunk at a time, until it has nothing more or
// the answers pile up (kMaxPendingOutput): then reading waits for flush() to empty them.
void AdminConsole::on_readable(Connection& c) {
    std::byte chunk[4096];
    while (!c.closing && !c.reload_ticket && c.out.size() < kMaxPendingOutput) {
        const ssize_t n = ::recv(c.fd.get(), chunk, sizeof chunk, MSG_DONTWAIT);
        if (n > 0) {
            c.in.insert(c.in.end(), chunk, chunk + n);
            if (!process(c))
                c.closing = true;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            break;
        drop(c);  // the session is gone (or a socket error)
        return;
    }
    if (c.closing || c.reload_ticket || c.out.size() >= kMaxPendingOutput)
        event_del(c.read.get());
    flush(c);
}

// Answers every whole message in `in`, as long as the answers do not pile up. What was
// answered leaves `in` once, at the end: a read of many small messages costs no more than
// one pass over it.
bool AdminConsole::process(Connection& c) {
    if (!c.started && !process_startup(c))
        return false;
    size_t done = 0;
    bool go_on = true;
    while (go_on && c.started && !c.reload_ticket &&
           c.in.size() - done >= protocol::kMessageHeaderSize && c.out.size() < kMaxPendingOutput) {
        const std::span<const std::byte> rest = std::span<const std::byte>(c.in).subspan(done);
        const char type = static_cast<char>(rest[0]);
        const protocol::MessageHeaderParse header =
            protocol::parse_message_header(rest, kMaxConsoleMessage);
        if (header.status != protocol::ParseStatus::Ok) {
            protocol::BackendWriter out;
            out.error("FATAL", protocol::kSqlstateProtocolViolation,
                      "l5pgd admin console: invalid message");
            c.out.insert(c.out.end(), out.bytes().begin(), out.bytes().end());
            return false;
        }
        const size_t total = 1 + header.header.length;
        if (rest.size() < total)
            break;
        go_on = process_message(
            c, type,
            rest.subspan(protocol::kMessageHeaderSize, total - protocol::kMessageHeaderSize));
        done += total;
    }
    c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(done));
    return go_on;
}

// The session sends the client's StartupMessage first, as it would to Postgres.
bool AdminConsole::process_startup(Connection& c) {
    if (c.in.size() < 4)
        return true;
    const uint32_t length = protocol::read_be32(c.in.data());
    if (length < protocol::kMinStartupPacketLength || length > protocol::kMaxStartupPacketLength)
        return false;
    if (c.in.size() < length)
        return true;
    c.in.erase(c.in.begin(), c.in.begin() + length);
    c.started = true;
    protocol::BackendWriter out;
    greet(out);
    c.out.insert(c.out.end(), out.bytes().begin(), out.bytes().end());
    return true;
}

bool AdminConsole::process_message(Connection& c, char type, std::span<const std::byte> body) {
    protocol::BackendWriter out;
    bool go_on = true;
    const bool known = type == 'Q' || type == 'F' || type == 'X' || type == 'S' ||
                       is_extended_protocol(type) || is_copy_message(type);
    if (!known) {
        out.error("FATAL", protocol::kSqlstateProtocolViolation,
                  "l5pgd admin console: unexpected message type");
        go_on = false;
    } else if (type == 'X') {
        go_on = false;
    } else if (type == 'S') {  // Sync: the end of a refused extended-protocol exchange
        c.skipping_extended = false;
        out.ready_for_query();
    } else if (c.skipping_extended) {
        // As Postgres after an error in an extended-protocol exchange: every message up to
        // the Sync is ignored, a Query or FunctionCall too (answering them would add a
        // ReadyForQuery the client does not count on).
    } else if (type == 'Q') {
        if (const std::optional<std::string_view> sql = query_string(body)) {
            AdminView view = view_();
            if (!c.may_reload)
                view.request_reload = nullptr;
            c.reload_ticket = answer_admin_query(*sql, view, out);
        } else {
            out.error("ERROR", protocol::kSqlstateProtocolViolation, "invalid message format");
            out.ready_for_query();
        }
    } else if (is_extended_protocol(type)) {
        out.error("ERROR", protocol::kSqlstateFeatureNotSupported,
                  "l5pgd admin console: only simple queries (the extended query protocol "
                  "is not supported)");
        c.skipping_extended = true;
    } else if (type == 'F') {  // FunctionCall: answered on its own, as Postgres does
        out.error("ERROR", protocol::kSqlstateFeatureNotSupported,
                  "l5pgd admin console: only simple queries (no function calls)");
        out.ready_for_query();
    }  // CopyData, CopyDone, CopyFail outside a COPY: ignored, as by Postgres
    c.out.insert(c.out.end(), out.bytes().begin(), out.bytes().end());
    return go_on;
}

// Writes the answers; once the session took them all, answers the queries read meanwhile
// (process() stopped at kMaxPendingOutput) and reads again.
void AdminConsole::flush(Connection& c) {
    for (;;) {
        if (!write_out(c))
            return drop(c);
        if (!c.out.empty()) {
            event_add(c.write.get(), nullptr);
            return;
        }
        event_del(c.write.get());
        if (c.closing)
            return drop(c);
        if (!process(c)) {
            c.closing = true;
            continue;
        }
        if (c.out.empty()) {
            if (!c.reload_ticket)
                event_add(c.read.get(), nullptr);
            return;
        }
    }
}

// Few console connections are open at a time: each wake looks at them all.
void AdminConsole::answer_reloads(const ReloadLedger& ledger) {
    std::vector<Connection*> answered;
    for (const auto& [key, c] : connections_) {
        if (!c->reload_ticket)
            continue;
        const std::optional<ReloadLedger::Outcome> outcome = ledger.outcome(*c->reload_ticket);
        if (!outcome)
            continue;
        protocol::BackendWriter out;
        answer_reload(*outcome, out);
        c->out.insert(c->out.end(), out.bytes().begin(), out.bytes().end());
        c->reload_ticket.reset();
        answered.push_back(c.get());
    }
    for (Connection* c : answered)
        flush(*c);  // then what the session sent behind the RELOAD
}

// False when the session is gone.
bool AdminConsole::write_out(Connection& c) {
    size_t sent = 0;
    while (sent < c.out.size()) {
        const ssize_t n = ::send(c.fd.get(), c.out.data() + sent, c.out.size() - sent,
                                 MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            sent += static_cast<size_t>(n);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            break;
        return false;
    }
    c.out.erase(c.out.begin(), c.out.begin() + static_cast<ptrdiff_t>(sent));
    return true;
}

void AdminConsole::drop(Connection& c) {
    connections_.erase(&c);  // closes the fd: the session sees Postgres hang up
}

}  // namespace l5pg::daemon
