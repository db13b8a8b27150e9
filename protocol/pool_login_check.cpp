#include "protocol/pool_login_check.hpp"

#include <algorithm>
#include <optional>

#include "protocol/error_response.hpp"
#include "protocol/startup.hpp"
#include "protocol/wire.hpp"

namespace l5pg::protocol {
namespace {

// session_user and current_database() name the backend's role and database by their OIDs
// as they are named now. CONNECT is the login role's, as Postgres checks it at login (the
// current role may be another: ALTER ROLE ... SET role). A datconnlimit of -2 marks a
// database a DROP left half done. Everything schema-qualified, the operators too: the
// role's search_path is its own.
//
// The fourth column is the CONNECTION LIMITs of the role and the database, which Postgres
// checks for a login that is not a superuser's by counting the backends that exist with it,
// itself included (CountUserBackends, CountDBConnections; "approximate", its docs say): so
// here, with the backend to be reused counted as the new login would count itself. Client
// backends and walsenders are what it counts (not background workers). backend_type is NULL
// in rows of roles whose statistics the asking role may not read (pg_stat_get_activity hides
// it): those count too, as anything else would count other roles' sessions as none; counting
// one too many only makes l5pgd open a new backend, where Postgres decides.
//
// The fifth is every pg_db_role_setting row a login of this role to this database applies
// (process_settings(): the role in the database, the role, the database, all roles), in a
// fixed order; pg_db_role_setting is readable by every role. It begins with "superuser "
// for a superuser: Postgres 15 decides SET SESSION AUTHORIZATION by the superuser flag the
// login had, so a role demoted since must not get its old backend.
//
// The sixth: the role the backend runs as, set at login (a StartupMessage's role or
// options -c role=, ALTER ROLE ... SET role), may still be taken by the login role.
// Postgres checks that membership when the setting is applied, at login, and RESET ROLE
// returns to the role then resolved without asking again (SET option from Postgres 16).
//
// The seventh: the client set no superuser-only parameter at login (PGOPTIONS='-c
// session_replication_role=replica' after GRANT SET ON PARAMETER), unless its role is a
// superuser: that grant is checked at login only, and which were granted cannot be asked on
// every version, so such a backend is not kept at all. pg_settings hides the few parameters
// marked superuser-only for reading (session_preload_libraries) from roles without
// pg_read_all_settings: those are not seen (README).
//
// The eighth: the database has no login event trigger that is not disabled (Postgres 17:
// CREATE EVENT TRIGGER ... ON login). It runs when a backend starts, so a client given a kept
// backend would skip it (an audit record, a refusal outside office hours); such a database's
// backends are never kept. pg_event_trigger is per database and readable by every role;
// before Postgres 17 no row has that event. (evtenabled 'R' fires only under
// session_replication_role = replica, 'O' only outside it: each counts, whatever the role.)
constexpr std::string_view kQuery =
    "SELECT r.rolname, d.datname, r.rolcanlogin AND d.datallowconn AND "
    "d.datconnlimit OPERATOR(pg_catalog.<>) '-2'::pg_catalog.int4 AND "
    "pg_catalog.has_database_privilege(r.oid, d.oid, 'CONNECT'), "
    "r.rolsuper OR ("
    "(r.rolconnlimit OPERATOR(pg_catalog.<) 0 OR "
    "(SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_activity a "
    "WHERE a.usesysid OPERATOR(pg_catalog.=) r.oid AND (a.backend_type IS NULL OR "
    "a.backend_type OPERATOR(pg_catalog.=) ANY ('{client backend,walsender}'::pg_catalog.text[]))) "
    "OPERATOR(pg_catalog.<=) r.rolconnlimit) AND "
    "(d.datconnlimit OPERATOR(pg_catalog.<) 0 OR "
    "(SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_activity a "
    "WHERE a.datid OPERATOR(pg_catalog.=) d.oid AND (a.backend_type IS NULL OR "
    "a.backend_type OPERATOR(pg_catalog.=) ANY ('{client backend,walsender}'::pg_catalog.text[]))) "
    "OPERATOR(pg_catalog.<=) d.datconnlimit)), "
    "pg_catalog.concat(CASE WHEN r.rolsuper THEN 'superuser ' END, "
    "'as ', pg_catalog.quote_ident(current_user), ' ', "
    "COALESCE((SELECT pg_catalog.string_agg(pg_catalog.concat_ws(' ', s.setdatabase, s.setrole, "
    "s.setconfig), ';' ORDER BY s.setdatabase, s.setrole) "
    "FROM pg_catalog.pg_db_role_setting s "
    "WHERE s.setdatabase OPERATOR(pg_catalog.=) ANY (ARRAY['0'::pg_catalog.oid, d.oid]) AND "
    "s.setrole OPERATOR(pg_catalog.=) ANY (ARRAY['0'::pg_catalog.oid, r.oid])), '')), "
    "current_user OPERATOR(pg_catalog.=) session_user OR r.rolsuper OR "
    "pg_catalog.pg_has_role(session_user, current_user, CASE WHEN "
    "pg_catalog.current_setting('server_version_num')::pg_catalog.int4 "
    "OPERATOR(pg_catalog.>=) 160000 THEN 'SET' ELSE 'MEMBER' END), "
    "r.rolsuper OR NOT EXISTS (SELECT FROM pg_catalog.pg_settings g "
    "WHERE g.source OPERATOR(pg_catalog.=) 'client' AND "
    "g.context OPERATOR(pg_catalog.=) ANY ('{superuser,superuser-backend}'::pg_catalog.text[])), "
    "NOT EXISTS (SELECT FROM pg_catalog.pg_event_trigger t "
    "WHERE t.evtevent OPERATOR(pg_catalog.=) 'login'::pg_catalog.name AND "
    "t.evtenabled OPERATOR(pg_catalog.<>) 'D'::pg_catalog.\"char\") "
    "FROM pg_catalog.pg_roles r, pg_catalog.pg_database d "
    "WHERE r.rolname OPERATOR(pg_catalog.=) session_user "
    "AND d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()";
constexpr size_t kColumns = 8;
// A message of the answer (the settings' row may be long), and the answer in all.
constexpr size_t kMaxMessage = 1024 * 1024;
constexpr size_t kMaxCheckReply = 4 * 1024 * 1024;

bool tag_is(std::span<const std::byte> body, std::string_view tag) {
    return body.size() == tag.size() + 1 && body.back() == std::byte{0} &&
           std::equal(tag.begin(), tag.end(), reinterpret_cast<const char*>(body.data()));
}

// The DataRow's columns as text; nullopt for a malformed row (a NULL counts as malformed:
// none of the columns may be NULL).
std::optional<std::vector<std::string_view>> row_values(std::span<const std::byte> body) {
    if (body.size() < 2 || read_be16(body.data()) != kColumns)
        return std::nullopt;
    body = body.subspan(2);
    std::vector<std::string_view> values;
    while (!body.empty()) {
        if (body.size() < 4)
            return std::nullopt;
        const uint32_t length = read_be32(body.data());
        if (length > body.size() - 4)  // also a NULL's -1
            return std::nullopt;
        values.emplace_back(reinterpret_cast<const char*>(body.data() + 4), length);
        body = body.subspan(4 + length);
    }
    if (values.size() != kColumns)
        return std::nullopt;
    return values;
}

}  // namespace

PoolLoginCheck::PoolLoginCheck(std::string_view role, std::string_view database, Purpose purpose,
                               std::string settings_at_start)
    : role_(postgres_name(role)),
      database_(postgres_name(database)),
      purpose_(purpose),
      settings_(std::move(settings_at_start)) {}

std::vector<std::byte> PoolLoginCheck::request() {
    std::vector<std::byte> out;
    append_query_message(out, kQuery);
    return out;
}

PoolLoginCheck::Status PoolLoginCheck::feed(std::span<const std::byte> bytes,
                                            ServerGreeting& greeting) {
    if (status_ != Status::NeedMore)
        return status_ == Status::Failed ? status_ : fail("bytes after the answer");
    buffer_.append(bytes);
    status_ = parse(greeting);
    if (status_ == Status::NeedMore && buffer_.size() > kMaxCheckReply)
        status_ = fail("an oversized answer");  // not followed to its end
    return status_;
}

// Anything but the answer expected, short of a FATAL or a broken frame: the check fails,
// once the answer's ReadyForQuery is in, so that what follows it is Postgres's stream again.
void PoolLoginCheck::fail_at_ready(std::string why) {
    if (!errored_)
        failure_ = std::move(why);
    errored_ = true;
}

PoolLoginCheck::Status PoolLoginCheck::fail(std::string why) {
    failure_ = std::move(why);
    return status_ = Status::Failed;
}

// The row names the role and database a new login by the client's names would get, and
// says that login would be allowed.
bool PoolLoginCheck::row_passes(std::span<const std::byte> body) {
    const std::optional<std::vector<std::string_view>> values = row_values(body);
    if (!values) {
        failure_ = "a malformed row";
        return false;
    }
    if ((*values)[0] != role_ || (*values)[1] != database_) {
        failure_ = "its role or database was renamed";
        return false;
    }
    if ((*values)[2] != "t") {
        failure_ =
            "its role may no longer log in to its database (NOLOGIN, CONNECT, or "
            "ALLOW_CONNECTIONS)";
        return false;
    }
    if ((*values)[3] != "t") {
        failure_ = "its role or database has reached its CONNECTION LIMIT";
        return false;
    }
    if ((*values)[5] != "t") {
        failure_ = "its login role may no longer take the role it runs as (role set at login)";
        return false;
    }
    if ((*values)[6] != "t") {
        failure_ =
            "its client set a superuser-only parameter at login, which Postgres allows by a "
            "grant it checks at login only";
        return false;
    }
    if ((*values)[7] != "t") {
        failure_ =
            "its database has a login event trigger, which runs when a backend starts and "
            "would not for a reused one";
        return false;
    }
    if (purpose_ == Purpose::AtStart) {
        settings_ = (*values)[4];
    } else if ((*values)[4] != settings_) {
        failure_ =
            "the settings a login of its role to its database takes (ALTER ROLE / ALTER "
            "DATABASE ... SET), its SUPERUSER attribute, or the name of the role it runs as "
            "(set at login) changed since it started";
        return false;
    }
    return true;
}

PoolLoginCheck::Status PoolLoginCheck::parse(ServerGreeting& greeting) {
    for (;;) {
        const MessageView msg = buffer_.next(kMaxMessage);
        if (msg.status == ParseStatus::Invalid)
            return fail("a malformed message");  // not followed to its end
        if (msg.status == ParseStatus::NeedMore)
            return Status::NeedMore;
        if (msg.type == 'Z') {
            followed_ = true;
            return at_ready(msg.body);
        }
        if (msg.type == 'E') {
            const std::optional<ReceivedError> error = read_error_response(msg.body);
            if (error && error->ends_session()) {  // not ours to take: the client's to see
                buffer_.unread(msg);
                followed_ = true;
                return fail("a FATAL error: " + std::string(error->message));
            }
            fail_at_ready(error ? "an error: " + std::string(error->message)
                                : std::string("a malformed error"));
            continue;
        }
        if (msg.type == 'S') {  // reported now: changed while the backend was idle
            std::string name, value;
            if (parse_parameter_status(msg.body, name, value))
                greeting.set_parameter(name, value);
            else
                fail_at_ready("a malformed ParameterStatus");
            continue;
        }
        if (msg.type == 'N' || errored_)  // a notice changes nothing; after a failure, skip
            continue;
        take(msg);
    }
}

// One message of the answer before its ReadyForQuery: the RowDescription, the one row or
// none (CommandComplete at once), the CommandComplete.
void PoolLoginCheck::take(const MessageView& msg) {
    const bool expected = msg.type == expected_ || (expected_ == 'D' && msg.type == 'C');
    if (!expected ||
        (msg.type == 'T' && (msg.body.size() < 2 || read_be16(msg.body.data()) != kColumns))) {
        fail_at_ready(std::string("an unexpected message '") + msg.type + "'");
        return;
    }
    switch (msg.type) {
        case 'T':
            expected_ = 'D';
            break;
        case 'D':
            row_seen_ = true;
            row_passed_ = row_passes(msg.body);
            expected_ = 'C';
            break;
        case 'C':
            if (!tag_is(msg.body, row_seen_ ? "SELECT 1" : "SELECT 0"))
                fail_at_ready("an unexpected command tag");
            expected_ = 'Z';
            break;
        default:
            break;
    }
}

PoolLoginCheck::Status PoolLoginCheck::at_ready(std::span<const std::byte> body) {
    if (body.size() != 1 || body[0] != std::byte{'I'})
        return fail("a backend not idle");
    if (purpose_ == Purpose::BeforeReuse && !buffer_.rest().empty())
        return fail("bytes after the answer");
    if (errored_)
        return fail(failure_);
    if (expected_ != 'Z')
        return fail("an answer cut short");
    if (!row_seen_)
        return fail("its role or database no longer exists under its name");
    return row_passed_ ? Status::Passed : fail(failure_);
}

}  // namespace l5pg::protocol
