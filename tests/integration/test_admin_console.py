"""The admin console: `psql -d l5pgd -c 'SHOW SESSIONS'` answered by l5pgd itself, behind
the same client check as every session plus admin.users."""
import socket
import struct
import threading
import time

import pytest

from tests.harness import pgwire
from tests.harness.procstat import vm_rss
from tests.harness.client import popen, psql, psql_cmd, run, shm_target, tcp_target, unix_target
from tests.harness.l5pgd import L5pgd

COLUMNS = ["id", "transport", "client", "database", "role", "state", "bytes_from_client",
           "bytes_to_client", "connected_at", "age_s", "idle_s", "backend_pid"]


def console(target, sql, **kw):
    return psql(target, sql, dbname="l5pgd", **kw)


def show_sessions(target):
    out = run(psql_cmd("-d", "l5pgd", "-F", "\t", "-c", "SHOW SESSIONS"), target).stdout
    return [dict(zip(COLUMNS, line.split("\t"))) for line in out.splitlines() if line]


@pytest.mark.timeout(90)
def test_show_sessions_lists_shm_unix_and_tcp_sessions(l5pgd, shim, cluster):
    """Three sessions each running a statement; the console sees each with its transport,
    role, database and state, and itself as an idle-free admin session."""
    sleepers = {name: popen(psql_cmd("-c", f"select pg_sleep(30) /* {name} */"), make(l5pgd))
                for name, make in (("shm", shm_target), ("unix", unix_target), ("tcp", tcp_target))}
    try:
        deadline = time.monotonic() + 20
        while True:
            rows = show_sessions(unix_target(l5pgd))
            # Active after the login's answers: running pg_sleep (not just starting up).
            busy = {r["transport"]: r for r in rows if r["database"] == "postgres" and
                    r["state"] == "active" and int(r["bytes_to_client"]) > 0}
            if {"shm", "unix", "tcp"} <= busy.keys() or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert {"shm", "unix", "tcp"} <= busy.keys(), rows
        for transport, row in busy.items():
            assert row["role"] == "postgres"
            assert int(row["bytes_from_client"]) > 0 and int(row["bytes_to_client"]) > 0, row
            assert float(row["age_s"]) >= 0
        for name in busy:  # each session's own backend, as pg_stat_activity shows it
            assert busy[name]["backend_pid"] == cluster.sql(
                f"select pid from pg_stat_activity where query like '%/* {name} */'"), busy[name]
        assert busy["tcp"]["client"].startswith("127.0.0.1:")
        assert busy["shm"]["client"].startswith("uid ")
        # The console session itself is listed too, over the Unix socket.
        assert any(r["database"] == "l5pgd" and r["transport"] == "unix" for r in rows), rows
    finally:
        for p in sleepers.values():
            p.kill()
            p.wait()
    # Gone once their clients are.
    deadline = time.monotonic() + 20
    while any(r["database"] == "postgres" for r in show_sessions(unix_target(l5pgd))):
        assert time.monotonic() < deadline, show_sessions(unix_target(l5pgd))
        time.sleep(0.1)


def test_console_over_shared_memory(l5pgd, shim):
    assert console(shm_target(l5pgd), "show version").startswith("l5pgd ")
    rows = show_sessions(shm_target(l5pgd))
    assert any(r["database"] == "l5pgd" and r["transport"] == "shm" for r in rows), rows


STATS_COLUMNS = ["transport", "sessions_total", "sessions_active", "session_errors",
                 "bytes_from_clients", "bytes_to_clients", "round_trips", "avg_round_trip_us"]


def show_stats(target):
    out = run(psql_cmd("-d", "l5pgd", "-F", "\t", "-c", "SHOW STATS"), target).stdout
    rows = [dict(zip(STATS_COLUMNS, line.split("\t"))) for line in out.splitlines() if line]
    return {r["transport"]: r for r in rows}


@pytest.mark.timeout(60)
def test_show_stats_counts_per_transport_as_the_metrics_do(l5pgd, shim):
    before = show_stats(unix_target(l5pgd))
    psql(shm_target(l5pgd), "select 1")
    after = show_stats(unix_target(l5pgd))
    assert set(after) == {"unix", "shm", "tcp", "rdma"}, after
    shm, was = after["shm"], before["shm"]
    assert int(shm["sessions_total"]) == int(was["sessions_total"]) + 1, (was, shm)
    assert int(shm["round_trips"]) > int(was["round_trips"]), (was, shm)
    assert int(shm["bytes_to_clients"]) > int(was["bytes_to_clients"]), (was, shm)
    assert float(shm["avg_round_trip_us"]) > 0, shm
    # The same counters /metrics shows.
    assert int(shm["sessions_total"]) == l5pgd.metric("l5pg_sessions_total", transport="shm")
    # The console's own sessions are Unix ones, one of them open now.
    assert int(after["unix"]["sessions_active"]) >= 1, after


def test_unknown_command_is_an_error_and_the_session_goes_on(l5pgd):
    r = run(psql_cmd("-d", "l5pgd", "-v", "ON_ERROR_STOP=0", "-c", "select 1", "-c",
                     "SHOW VERSION;"), unix_target(l5pgd), check=False)
    assert 'unknown command "select 1"' in r.stderr and "SHOW HELP" in r.stderr, r.stderr
    assert "l5pgd " in r.stdout


def test_a_role_not_in_admin_users_is_refused(workdir, cluster):
    with L5pgd(workdir / "l5pgd-admin-users", cluster,
               extra_overrides=["admin.users=[monitor]"]) as d:
        before = d.metric("l5pg_auth_failures_total", transport="unix", reason="admin_console")
        r = console(unix_target(d), "show sessions", check=False)
        assert r.returncode != 0
        assert ('role "postgres" may not use the admin console (rule admin.users, '
                'admin.stats_users)') in r.stderr
        assert d.metric("l5pg_auth_failures_total", transport="unix",
                        reason="admin_console") == before + 1
        # Ordinary databases are unaffected.
        assert psql(unix_target(d), "select 1") == "1"


def test_a_refused_role_is_shown_as_valid_utf8_and_cut(workdir, cluster):
    """A TCP client (auth.tcp=trust) asks for the console with a role of 5000 bytes, invalid
    UTF-8 and a newline: the FATAL (and the log line it goes into) shows at most 63 bytes of
    it, as valid UTF-8, instead of all of it as sent."""
    with L5pgd(workdir / "l5pgd-admin-hostile", cluster,
               extra_overrides=["admin.users=[monitor]"]) as d:
        role = b"r\xff\nforged " + b"x" * 5000
        body = struct.pack("!I", 196608) + b"user\0" + role + b"\0database\0l5pgd\0\0"
        with socket.create_connection(("127.0.0.1", d.port), timeout=10) as s:
            s.sendall(struct.pack("!I", len(body) + 4) + body)
            t, msg = pgwire.read_message(s)
        assert t == "E"
        text = msg.split(b"\0M", 1)[1].split(b"\0", 1)[0]
        text.decode("utf-8")  # valid
        assert b"may not use the admin console" in text and len(text) < 200, text
        assert b"x" * 64 not in text
        assert "x" * 64 not in d.log_text()


def test_stats_users_may_read_but_not_reload(workdir, cluster):
    """admin.stats_users (PgBouncer's stats_users): the SHOW commands, but RELOAD is refused
    with 42501 and reloads nothing; a role in admin.users may."""
    with L5pgd(workdir / "l5pgd-stats-users", cluster,
               extra_overrides=["admin.users=[monitor]", "admin.stats_users=[postgres]"]) as d:
        assert console(unix_target(d), "show version").startswith("l5pgd ")
        r = console(unix_target(d), "reload", check=False)
        assert r.returncode != 0
        assert "permission denied: RELOAD needs a role of admin.users" in r.stderr, r.stderr
        assert "RELOAD requested" not in d.log_text()
    with L5pgd(workdir / "l5pgd-admin-reload", cluster) as d:
        assert console(unix_target(d), "reload") == "RELOAD"


def test_admin_database_can_be_renamed_or_disabled(workdir, cluster):
    with L5pgd(workdir / "l5pgd-admin-db", cluster, extra_overrides=["admin.database="]) as d:
        # No console: the name goes to Postgres, which has no such database.
        r = console(unix_target(d), "show sessions", check=False)
        assert r.returncode != 0 and 'database "l5pgd" does not exist' in r.stderr, r.stderr


# -- the console's own protocol handling, on a raw socket ------------------------------------

def console_socket(l5pgd):
    return pgwire.unix_login(l5pgd.socket_path, database="l5pgd")


def message(typ, body=b""):
    return typ + struct.pack("!I", 4 + len(body)) + body


def answer_types(s):
    """The types of the messages up to and including the next ReadyForQuery."""
    types = ""
    while not types.endswith("Z"):
        typ, _ = pgwire.read_message(s)
        types += typ
    return types


@pytest.mark.timeout(60)
def test_reloads_asked_together_are_each_answered_and_what_follows_waits(l5pgd):
    """RELOAD answers once the reload ran: what a client pipelines behind it is answered
    after it, in order; several consoles asking at once are all answered (one reload may
    answer them all); one that leaves while it waits changes nothing for the others."""
    gone = console_socket(l5pgd)
    gone.sendall(message(b"Q", b"reload\0"))
    gone.close()
    clients = [console_socket(l5pgd) for _ in range(3)]
    try:
        for s in clients:
            s.sendall(message(b"Q", b"reload\0") + message(b"Q", b"show version\0"))
        for s in clients:
            typ, body = pgwire.read_message(s)
            assert (typ, body) == ("C", b"RELOAD\0"), (typ, body)
            assert answer_types(s) == "Z"
            assert answer_types(s) == "TDCZ"
    finally:
        for s in clients:
            s.close()
    assert console(unix_target(l5pgd), "show version").startswith("l5pgd ")
    assert l5pgd.alive()


@pytest.mark.timeout(60)
def test_console_answers_messages_as_postgres_does(l5pgd):
    """A FunctionCall gets its error and a ReadyForQuery (psql's \\lo_* and PQfn waited for
    one); CopyData, CopyDone and CopyFail outside a COPY are ignored; a Query with a NUL
    inside is an invalid message (it ran what came before the NUL), and the session goes
    on."""
    s = console_socket(l5pgd)
    try:
        s.sendall(message(b"F", struct.pack("!IHHIH", 1, 0, 0, 0, 0)))
        assert answer_types(s) == "EZ"
        s.sendall(message(b"d", b"x") + message(b"c") + message(b"f", b"oops\0") +
                  message(b"Q", b"show version\0"))
        assert answer_types(s) == "TDCZ"
        s.sendall(message(b"Q", b"show version\0junk\0"))
        typ, body = pgwire.read_message(s)
        assert typ == "E" and b"C08P01" in body, (typ, body)
        assert answer_types(s) == "Z"
        s.sendall(message(b"Q", b"show version"))  # not terminated
        assert answer_types(s) == "EZ"
        s.sendall(message(b"Q", b"show version\0"))
        assert answer_types(s) == "TDCZ"
    finally:
        s.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["postgres", "console"])
def test_after_a_refused_parse_everything_waits_for_the_sync(l5pgd, cluster, where):
    """After an error in an extended-protocol exchange Postgres ignores every message up to
    the Sync, a Query and a FunctionCall too, and answers the Sync alone: the console used to
    answer the Query with an extra ReadyForQuery, which put a client counting them out of
    step. Postgres itself is the reference."""
    s = (pgwire.unix_login(cluster.socket_dir / f".s.PGSQL.{cluster.port}")
         if where == "postgres" else console_socket(l5pgd))
    sql = b"select 1\0" if where == "postgres" else b"show version\0"
    try:
        s.sendall(message(b"P", b"\0junk!\0\0\0") + message(b"Q", sql) +
                  message(b"F", struct.pack("!IHHIH", 1, 0, 0, 0, 0)) + message(b"S"))
        assert answer_types(s) == "EZ"
        s.sendall(message(b"Q", sql))
        assert answer_types(s) == "TDCZ"
    finally:
        s.close()


@pytest.mark.timeout(90)
def test_console_client_that_never_reads_is_held_back_not_buffered(l5pgd):
    """100,000 SHOW CONFIG (about 4 KiB of answer each) sent without reading: the console
    stops reading once its answers wait (as Postgres, whose writes block), so the sender
    blocks and l5pgd's memory stays put; it used to answer them all into memory (400 MB)."""
    s = console_socket(l5pgd)
    pid = l5pgd.pid()
    rss_before = vm_rss(pid)
    sent = [0]

    def pump():
        query = message(b"Q", b"show config\0")
        try:
            for _ in range(100):
                s.sendall(query * 1000)
                sent[0] += 1000
        except OSError:
            pass  # closed below, while blocked

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    time.sleep(3)
    growth = vm_rss(pid) - rss_before
    try:
        assert sent[0] < 100_000, "the sender was never held back"
        assert growth < 64 * 1024 * 1024, f"l5pgd grew by {growth >> 20} MiB"
    finally:
        s.shutdown(socket.SHUT_RDWR)
        s.close()
        t.join(10)
    assert console(unix_target(l5pgd), "show version").startswith("l5pgd ")


@pytest.mark.timeout(60)
def test_console_queries_are_not_postgres_round_trips(l5pgd):
    """l5pg_upstream_round_trip_seconds and SHOW STATS' round trips are Postgres's: the
    console's own logins and queries (a monitoring agent's every 15 s) used to drag them
    down."""
    def round_trips():
        return l5pgd.metric("l5pg_upstream_round_trip_seconds_count", transport="unix")

    before = round_trips()
    for _ in range(3):
        console(unix_target(l5pgd), "show version")
    assert round_trips() == before
    psql(unix_target(l5pgd), "select 1")
    assert round_trips() > before  # a login and a query of Postgres's do count


@pytest.mark.timeout(60)
def test_a_statement_stays_active_after_its_first_notice(l5pgd):
    """SHOW SESSIONS' state is active until Postgres's ReadyForQuery: a statement that sent a
    notice (or streams its result) is still running. It used to turn idle at the answer's
    first byte."""
    def postgres_sessions():
        return [r for r in show_sessions(unix_target(l5pgd)) if r["database"] == "postgres"]

    wait_until_no_postgres_sessions = time.monotonic() + 20
    while postgres_sessions():  # earlier tests' sessions closing
        assert time.monotonic() < wait_until_no_postgres_sessions, postgres_sessions()
        time.sleep(0.05)
    p = popen(psql_cmd("-c", "do $$ begin raise notice 'started'; perform pg_sleep(30); end $$"),
              unix_target(l5pgd), text=True)
    try:
        line = p.stderr.readline()
        assert "NOTICE:  started" in line, line + p.stderr.read()
        rows = postgres_sessions()
        assert [r["state"] for r in rows] == ["active"], rows
    finally:
        p.kill()
        p.wait()
