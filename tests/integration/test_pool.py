"""Server-connection pooling in session mode (`pool.mode: session`, opt-in).

What these tests hold l5pgd to:

- Reuse: a client that leaves cleanly (Terminate) with its server connection idle gives that
  connection back; the next client with a byte-identical StartupMessage that passes l5pgd's
  client check gets it (same pg_backend_pid()), over the Unix socket, SHM, TCP and RDMA.
- Nothing of a session survives into the next one: SET values, SET ROLE, temp tables,
  prepared statements, held cursors, LISTEN, session advisory locks.
- A client that leaves inside a transaction, mid-query or by dying gives nothing back: its
  backend ends and its open transaction is rolled back, as with a direct connection.
- Different roles, databases or startup parameters never share a server connection, and a
  client refused by l5pgd's client check never gets one.
- Cancel: a pooled client gets a BackendKeyData of l5pgd's own, which cancels its query on a
  fresh and on a reused backend; a previous client's key no longer cancels anything.
- Never pooled: the admin console, the default configuration (and passthrough: test_auth.py).
- Metrics (l5pg_pool_idle_connections, l5pg_pool_returned_total, l5pg_pool_reused_total),
  pool.idle_timeout_ms, pool.max_idle, reloading pool.mode to none, pgbench run twice.
- What Postgres checks only at login (NOLOGIN, CONNECT, CONNECTION LIMIT, a renamed role) is
  asked again before a reuse.
- A client cannot make its pooled session cost l5pgd more than the bytes it sends (one test
  compares l5pgd's CPU for the same bytes through two ring sizes: a ratio, not a speed).

Pools are per worker thread: every l5pgd here runs with one worker, each test its own.
Waits are generous (WAIT) and only wait for a state; no test asserts how fast anything is.
"""
import json
import os
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.harness import paths, pgwire
from tests.harness.cancel import stop_process, wait_for_backend
from tests.harness.client import (PYTHON, direct_unix_target, make_target, pgbench, popen, psql,
                                  psql_cmd, run, run_python_json, unix_target)
from tests.harness.l5pgd import L5pgd, harness_auth_overrides
from tests.harness.procstat import cpu_seconds
from tests.harness.rdma import rdma_overrides, rdma_target
from tests.harness.waiting import wait_for

WAIT = 15  # seconds: an upper bound for anything l5pgd or Postgres does in the background

IDLE = "l5pg_pool_idle_connections"
RETURNED = "l5pg_pool_returned_total"
REUSED = "l5pg_pool_reused_total"

OTHER_ROLE = "l5pg_pool_role"
OTHER_DB = "l5pg_pool_db"

CANCEL_REQUEST_CODE = 80877102


# -- daemons ---------------------------------------------------------------------------------

class Daemons:
    """Starts l5pgds for one test, each in a directory of its own, and stops them afterwards.
    The fixture is named `l5pgd` (shadowing the session-wide one in this module) so that
    conftest's report hook appends their log tails to a failure."""

    def __init__(self, workdir, cluster):
        self.workdir = workdir
        self.cluster = cluster
        self.started = []  # every l5pgd asked for, for the log tails
        self.running = []  # those that came up

    def start(self, pool="session", extra=(), workers=1, auth=None, ident_rules=None,
              config_file=None):
        """pool: -o pool.mode=<pool> (None: not set). auth: auth -o overrides instead of the
        harness's (ident map root -> postgres); ident_rules: that map with other lines."""
        base = Path(tempfile.mkdtemp(prefix="pool-", dir=self.workdir))  # short: socket path limit
        os.chmod(base, 0o755)  # one test connects as another OS user
        if ident_rules is not None:
            auth = harness_auth_overrides(base, ident_rules)
        overrides = ([f"pool.mode={pool}"] if pool else []) + list(extra)
        d = L5pgd(base, self.cluster, workers=workers, extra_overrides=overrides,
                  auth_overrides=auth, config_file=config_file)
        self.started.append(d)
        d.start()
        self.running.append(d)
        return d

    def log_tail(self, n=30):
        return "\n".join(f"--- {d.log_path} ---\n{d.log_tail(n)}" for d in self.started)

    def stop_all(self):
        died = [d for d in self.running if not d.alive()]
        for d in self.running:
            d.stop()
        if died:
            pytest.fail("l5pgd died during the test\n" + "\n".join(d.log_tail(40) for d in died),
                        pytrace=False)


@pytest.fixture
def l5pgd(workdir, cluster, l5pgd_binary):
    daemons = Daemons(workdir, cluster)
    yield daemons
    daemons.stop_all()


@pytest.fixture(scope="module")
def other_role_and_db(cluster):
    """A second login role and a second database on the session's cluster."""
    if cluster.sql(f"select count(*) from pg_roles where rolname = '{OTHER_ROLE}'") == "0":
        cluster.sql(f"create role {OTHER_ROLE} login")
    if cluster.sql(f"select count(*) from pg_database where datname = '{OTHER_DB}'") == "0":
        cluster.sql(f"create database {OTHER_DB}")


def transport_target(request, d, transport):
    """A target over `transport`; d must have RDMA enabled for "rdma" (rdma_overrides())."""
    if transport in ("shm", "rdma"):
        request.getfixturevalue("shim")
    return rdma_target(d) if transport == "rdma" else make_target(transport, d)


# -- metrics and backends --------------------------------------------------------------------

def pool_metric(d, name):
    """The metric summed over its label sets (it has none; a per-worker label would not
    change the sum)."""
    return sum(v for (n, _), v in d.metrics().items() if n == name)


def wait_pool(d, name, predicate, what, timeout=WAIT):
    try:
        wait_for(lambda: predicate(pool_metric(d, name)), timeout, f"{name} {what}", interval=0.05)
    except AssertionError as e:
        raise AssertionError(f"{e} (it is {pool_metric(d, name)})") from None


def wait_idle(d, n, timeout=WAIT):
    """Until exactly n server connections are idle: a departed client's connection has been
    reset and kept (or closed)."""
    wait_pool(d, IDLE, lambda v: v == n, f"== {n}", timeout)


def backend_alive(cluster, pid):
    """Asked directly of the cluster, never through l5pgd."""
    return cluster.sql(f"select count(*) from pg_stat_activity where pid = {pid}") == "1"


def wait_backend_gone(cluster, pid, timeout=WAIT):
    wait_for(lambda: not backend_alive(cluster, pid), timeout, f"backend {pid} to exit",
             interval=0.05)


def assert_logged_not_kept(d, why):
    """l5pgd's debug log names `why` as the reason it did not keep a server connection."""
    line = f"server connection not kept: {why}"
    wait_for(lambda: line in d.log_text(), WAIT, f"'{line}' in l5pgd's log")


def new_app():
    """An application_name of this test's own, so its clients share no pool with others."""
    return f"pool-{uuid.uuid4().hex[:10]}"


# -- psql ------------------------------------------------------------------------------------

def psql_lines(target, *sqls, app, env=None, check=True):
    """Runs the statements in one psql session (quiet: only rows are printed), which then
    leaves with Terminate. Returns its output lines (the CompletedProcess if check=False)."""
    args = []
    for sql in sqls:
        args += ["-c", sql]
    r = run(psql_cmd("-q", *args), target, env={"PGAPPNAME": app, **(env or {})}, check=check)
    return r.stdout.splitlines() if check else r


def backend_pid(target, *setup, app, env=None):
    """pg_backend_pid() of a psql session that first runs `setup`."""
    return int(psql_lines(target, *setup, "select pg_backend_pid()", app=app, env=env)[-1])


# -- the protocol by hand (Unix socket) ------------------------------------------------------

def raw_login(d, app):
    """A session logged in over l5pgd's Unix socket: (socket, the greeting's messages)."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(60)
    s.connect(str(d.socket_path))
    s.sendall(pgwire.startup_packet(application_name=app))
    msgs = pgwire.read_until_ready(s)
    errors = [pgwire.parse_fields(body) for t, body in msgs if t == "E"]
    assert not errors, errors
    return s, msgs


def raw_connect(d, app):
    """A logged-in session over l5pgd's Unix socket: (socket, the 8 bytes of its
    BackendKeyData: process id and secret key as l5pgd sent them)."""
    s, msgs = raw_login(d, app)
    keys = [body[:8] for t, body in msgs if t == "K"]
    assert len(keys) == 1, f"expected one BackendKeyData: {[t for t, _ in msgs]}"
    return s, keys[0]


def send_query(s, sql):
    body = sql.encode() + b"\0"
    s.sendall(b"Q" + struct.pack("!I", len(body) + 4) + body)


def read_result(s):
    """Reads up to ReadyForQuery: (rows as lists of str, ErrorResponse fields or None)."""
    rows, error = [], None
    while True:
        t, body = pgwire.read_message(s)
        if t == "D":
            (ncols,) = struct.unpack("!h", body[:2])
            pos, row = 2, []
            for _ in range(ncols):
                (n,) = struct.unpack("!i", body[pos:pos + 4])
                pos += 4
                row.append(None if n < 0 else body[pos:pos + n].decode())
                pos += max(n, 0)
            rows.append(row)
        elif t == "E":
            error = pgwire.parse_fields(body)
        elif t == "Z":
            return rows, error


def raw_pid(s):
    send_query(s, "select pg_backend_pid()")
    rows, error = read_result(s)
    assert error is None, error
    return int(rows[0][0])


def kept_backend(d, app):
    """A raw client logs in and leaves cleanly: the process id of the backend l5pgd then
    keeps, and the 8 bytes of the BackendKeyData that client got."""
    s, key = raw_connect(d, app)
    pid = raw_pid(s)
    pgwire.terminate(s)
    s.close()
    wait_idle(d, 1)
    return pid, key


def cancel_sleep(d, cluster, s, app, key):
    """Runs pg_sleep(30) on raw session `s` and cancels it with `key`: the query must end
    with 57014 (query_canceled)."""
    send_query(s, "select pg_sleep(30)")
    wait_for_backend(cluster, app)
    send_cancel(d, key)
    _, error = read_result(s)
    assert error is not None and error.get("C") == "57014", error


def send_cancel(d, key):
    """A CancelRequest with `key` to l5pgd's Unix socket; returns once l5pgd has closed
    that connection (it has dealt with the request)."""
    c = socket.socket(socket.AF_UNIX)
    c.settimeout(WAIT)
    c.connect(str(d.socket_path))
    c.sendall(struct.pack("!II", 16, CANCEL_REQUEST_CODE) + key)
    assert pgwire.at_eof(c, WAIT), "l5pgd kept the cancel connection open"
    c.close()


# -- reuse -----------------------------------------------------------------------------------

@pytest.mark.parametrize("transport", ["unix", "shm", "tcp", "rdma"])
def test_next_identical_client_gets_the_same_backend(l5pgd, request, transport):
    d = l5pgd.start(extra=rdma_overrides() if transport == "rdma" else ())
    target = transport_target(request, d, transport)
    app = new_app()
    sessions = d.metric("l5pg_sessions_total", transport=transport)
    first = backend_pid(target, app=app)
    wait_idle(d, 1)
    second = backend_pid(target, app=app)
    assert second == first, "the second client got a new backend instead of the kept one"
    assert d.metric("l5pg_sessions_total", transport=transport) == sessions + 2, \
        f"the clients did not go over {transport}"


def test_newer_protocol_client_gets_3_0_on_the_kept_backend(l5pgd, cluster):
    # l5pgd negotiates protocol 3.2 and "_pq_." options down itself (test_startup.py checks
    # the answer against Postgres's own): Postgres sees the StartupMessage of a 3.0 client,
    # so the backend such a client left is reused, and 3.0's cancel key works.
    d = l5pgd.start()
    app = new_app()
    first, _ = kept_backend(d, app)
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(60)
    s.connect(str(d.socket_path))
    s.sendall(pgwire.startup_packet_of([("user", "postgres"), ("database", "postgres"),
                                        ("application_name", app), ("_pq_.l5pg_test", "1")],
                                       version=pgwire.PROTO_3_2))
    msgs = pgwire.read_until_ready(s)
    types = [t for t, _ in msgs]
    assert types[0] == "v" and types.count("v") == 1 and types[-1] == "Z", types
    keys = [body for t, body in msgs if t == "K"]
    assert [len(k) for k in keys] == [8], types
    assert raw_pid(s) == first, "the 3.2 client got a new backend instead of the kept one"
    cancel_sleep(d, cluster, s, app, keys[0])
    pgwire.terminate(s)
    s.close()


def test_metrics_count_returned_and_reused(l5pgd):
    d = l5pgd.start()
    target = unix_target(d)
    app = new_app()
    assert (pool_metric(d, IDLE), pool_metric(d, RETURNED), pool_metric(d, REUSED)) == (0, 0, 0)
    backend_pid(target, app=app)
    wait_idle(d, 1)
    wait_pool(d, RETURNED, lambda v: v == 1, "== 1")
    assert pool_metric(d, REUSED) == 0
    backend_pid(target, app=app)
    wait_pool(d, RETURNED, lambda v: v == 2, "== 2")
    wait_idle(d, 1)
    assert pool_metric(d, REUSED) == 1
    text = d.metrics_text()
    for name in (IDLE, RETURNED, REUSED):
        assert f"# HELP {name} " in text and f"# TYPE {name} " in text, name


def test_show_sessions_names_the_reused_backend(l5pgd):
    """The admin console's backend_pid is the kept backend's, which the client never learns
    (it holds a key of l5pgd's): pg_terminate_backend() ends the right session."""
    d = l5pgd.start()
    app = new_app()
    pid, _ = kept_backend(d, app)
    s, key = raw_connect(d, app)
    try:
        assert raw_pid(s) == pid
        assert int.from_bytes(key[:4], "big") != pid
        out = run(psql_cmd("-d", "l5pgd", "-F", "\t", "-c", "SHOW SESSIONS"), unix_target(d)).stdout
        rows = [line.split("\t") for line in out.splitlines()]
        assert [r[-1] for r in rows if r[3] == "postgres"] == [str(pid)], out
    finally:
        s.close()


# Statements that leave session state behind, and what the next client on the same backend
# must see instead.
STATE_CASES = {
    "set": (["set work_mem = '77MB'"], ["show work_mem"], "4MB"),
    "set_role": (["set role pg_monitor"], ["select current_user"], "postgres"),
    "temp_table": (["create temp table pool_tmp (i int)"],
                   ["select to_regclass('pg_temp.pool_tmp') is null"], "t"),
    "prepared_statement": (["prepare p as select 1"], ["prepare p as select 2", "execute p"], "2"),
    "held_cursor": (["declare c cursor with hold for select 1"],
                    ["declare c cursor with hold for select 2", "fetch c"], "2"),
    "listen": (["listen pool_chan"], ["select count(*) from pg_listening_channels()"], "0"),
    "advisory_lock": (["select pg_advisory_lock(42)"],
                      ["select count(*) from pg_locks where locktype = 'advisory' "
                       "and pid = pg_backend_pid()"], "0"),
}


@pytest.mark.parametrize("case", list(STATE_CASES))
def test_no_session_state_survives(l5pgd, case):
    setup, check, expected = STATE_CASES[case]
    d = l5pgd.start()
    target = unix_target(d)
    app = new_app()
    first = backend_pid(target, *setup, app=app)
    wait_idle(d, 1)
    lines = psql_lines(target, "select pg_backend_pid()", *check, app=app)
    assert int(lines[0]) == first, "not reused: this case would prove nothing"
    assert lines[-1] == expected, f"{case} survived into the next session: {lines}"


@pytest.mark.parametrize("later", ["as_it_was", "after_set_role"])
def test_role_set_at_login_holds_on_a_reused_backend(l5pgd, other_role_and_db, later):
    """options -c role=...: a new connection starts as that role, so a client that gets a
    kept backend must too, whatever role the previous client switched to. (Postgres 15's
    DISCARD ALL restores it by itself; the reset's RESET ROLE is for versions that do not.)"""
    d = l5pgd.start()
    target = unix_target(d)
    app = new_app()
    env = {"PGOPTIONS": f"-c role={OTHER_ROLE}"}
    setup = ["set role pg_monitor"] if later == "after_set_role" else []
    first = backend_pid(target, *setup, app=app, env=env)
    wait_idle(d, 1)
    lines = psql_lines(target, "select pg_backend_pid()", "select current_user", app=app,
                       env=env)
    assert int(lines[0]) == first, "not reused: this case would prove nothing"
    assert lines[-1] == OTHER_ROLE


def test_advisory_lock_free_for_others_once_its_client_left(l5pgd, cluster):
    d = l5pgd.start()
    target = unix_target(d)
    app = new_app()
    first = backend_pid(target, "select pg_advisory_lock(4242)", app=app)
    wait_idle(d, 1)
    assert backend_alive(cluster, first)
    # Directly on the cluster: the lock is free although the backend that took it lives on.
    assert cluster.sql("select pg_try_advisory_lock(4242)") == "t"
    assert backend_pid(target, app=app) == first, "the kept backend was not reused"


@pytest.fixture
def datestyle_default(cluster):
    """Changes DateStyle's default by a reload (as a promotion changes in_hot_standby's),
    and back afterwards; the argument is the new default."""
    def change(value):
        cluster.sql(f"ALTER SYSTEM SET DateStyle = '{value}'")
        cluster.sql("SELECT pg_reload_conf()")
    yield change
    cluster.sql("ALTER SYSTEM RESET DateStyle")
    cluster.sql("SELECT pg_reload_conf()")


def test_reused_backend_greets_with_what_postgres_last_reported(l5pgd, datestyle_default):
    # Postgres reports a setting only when it differs from what it last reported: the client
    # that held the backend through the reload heard of the new default, DISCARD ALL keeps it
    # without a word, so only l5pgd can tell the next client, as a new backend would.
    d = l5pgd.start()
    app = new_app()
    s, msgs = raw_login(d, app)
    assert pgwire.parameter_statuses(msgs)["DateStyle"] == "ISO, MDY"
    pid = raw_pid(s)
    datestyle_default("SQL, DMY")

    def reloaded():
        send_query(s, "SHOW DateStyle")
        rows, error = read_result(s)
        assert error is None, error
        return rows == [["SQL, DMY"]]
    wait_for(reloaded, WAIT, "the backend to take the new DateStyle")
    pgwire.terminate(s)
    s.close()
    wait_idle(d, 1)

    s, msgs = raw_login(d, app)
    assert raw_pid(s) == pid, "not reused: this case would prove nothing"
    assert pgwire.parameter_statuses(msgs)["DateStyle"] == "SQL, DMY"
    pgwire.terminate(s)
    s.close()


# -- clients that give nothing back ----------------------------------------------------------

def rows_tagged(cluster, tag):
    return int(cluster.sql(f"select count(*) from pool_tx where note = '{tag}'"))


@pytest.mark.parametrize("state", ["open", "failed"])
def test_client_leaving_inside_a_transaction_gives_nothing_back(l5pgd, cluster, state):
    cluster.sql("create table if not exists pool_tx (note text)")
    d = l5pgd.start()
    target = unix_target(d)
    app, tag = new_app(), uuid.uuid4().hex
    sqls = ["begin", f"insert into pool_tx values ('{tag}')", "select pg_backend_pid()"]
    if state == "failed":
        sqls.append("select 1/0")
    r = psql_lines(target, *sqls, app=app, check=False)
    assert (r.returncode != 0) == (state == "failed"), r.stderr
    first = int(r.stdout.splitlines()[-1])
    wait_backend_gone(cluster, first)
    assert rows_tagged(cluster, tag) == 0, "the open transaction was committed"
    assert pool_metric(d, RETURNED) == 0
    assert pool_metric(d, IDLE) == 0
    assert_logged_not_kept(d, "the backend is inside a transaction")
    assert backend_pid(target, app=app) != first


def test_client_leaving_mid_query_gives_nothing_back(l5pgd, cluster):
    """Query, then Terminate at once, without waiting for the answer."""
    d = l5pgd.start()
    app = new_app()
    s, _ = raw_connect(d, app)
    first = raw_pid(s)
    send_query(s, "select pg_sleep(1)")
    pgwire.terminate(s)
    s.close()
    wait_backend_gone(cluster, first)
    assert pool_metric(d, RETURNED) == 0
    assert pool_metric(d, IDLE) == 0
    assert_logged_not_kept(d, "Postgres had not answered every request")
    s, _ = raw_connect(d, app)
    assert raw_pid(s) != first
    pgwire.terminate(s)
    s.close()


def extended(kind, body=b""):
    return kind + struct.pack("!I", len(body) + 4) + body


def test_client_leaving_with_unsynced_extended_protocol_gives_nothing_back(l5pgd, cluster):
    """Parse, Bind, Execute with a row limit, Flush, then Terminate, no Sync: the last
    ReadyForQuery said idle, but the portal's implicit transaction is open. Directly, the
    disconnect rolls it back. l5pgd must see that from the client's messages and not try
    a reset at all (Postgres 15 happens to refuse DISCARD ALL there; nothing should rest
    on that)."""
    cluster.sql("create table if not exists pool_tx (note text)")
    d = l5pgd.start()
    app, tag = new_app(), uuid.uuid4().hex
    s, _ = raw_connect(d, app)
    first = raw_pid(s)
    sql = f"insert into pool_tx select '{tag}' from generate_series(1, 3) returning note"
    s.sendall(extended(b"P", b"\0" + sql.encode() + b"\0\0\0")
              + extended(b"B", b"\0\0\0\0\0\0\0\0")
              + extended(b"E", b"\0" + struct.pack("!I", 1)) + extended(b"H"))
    kinds = [pgwire.read_message(s)[0] for _ in range(4)]
    assert kinds == ["1", "2", "D", "s"], kinds  # ..., DataRow, PortalSuspended
    pgwire.terminate(s)
    s.close()
    wait_backend_gone(cluster, first)
    assert rows_tagged(cluster, tag) == 0, "the unsynced insert was committed"
    assert pool_metric(d, RETURNED) == 0
    assert "was not answered as expected" not in d.log_text(), "a reset was tried"
    assert_logged_not_kept(d, "extended-protocol messages after the last Sync")


def test_client_leaving_right_after_a_cancel_gives_nothing_back(l5pgd, cluster):
    """Postgres delivers a cancel asynchronously: one sent just before the client left could
    hit the next client's query on the kept backend. Such a backend is not kept."""
    d = l5pgd.start()
    app = new_app()
    s, key = raw_connect(d, app)
    first = raw_pid(s)
    cancel_sleep(d, cluster, s, app, key)
    pgwire.terminate(s)
    s.close()
    wait_backend_gone(cluster, first)
    assert pool_metric(d, RETURNED) == 0
    assert_logged_not_kept(d, "a cancel request for it is on its way, was sent in the last seconds")


@pytest.mark.timeout(60)
def test_cancel_sent_after_the_terminate_still_stops_the_query(l5pgd, cluster):
    """A driver's timeout: the query is cancelled and the connection closed, the Terminate
    (here) reaching l5pgd before the CancelRequest. A backend that is not kept (it has not
    answered) keeps its client's key until the session ends, as a plain session's does: the
    cancel stops the query, which would otherwise run its 60 s after its client left (with
    Postgres's default client_connection_check_interval, 0, which this session sets: the
    test cluster's would notice the closed connection)."""
    d = l5pgd.start()
    app = new_app()
    s, key = raw_connect(d, app)
    pid = raw_pid(s)
    send_query(s, "set client_connection_check_interval = 0")
    assert read_result(s)[1] is None
    send_query(s, "select pg_sleep(60)")
    wait_for_backend(cluster, app)
    pgwire.terminate(s)
    assert_logged_not_kept(d, "Postgres had not answered every request")
    send_cancel(d, key)
    wait_backend_gone(cluster, pid)
    s.close()


def test_backend_past_its_lifetime_is_not_kept(l5pgd, cluster):
    d = l5pgd.start(extra=["pool.server_lifetime_ms=300"])
    app = new_app()
    s, _ = raw_connect(d, app)
    first = raw_pid(s)
    time.sleep(0.6)
    pgwire.terminate(s)
    s.close()
    wait_backend_gone(cluster, first)
    assert pool_metric(d, RETURNED) == 0
    assert pool_metric(d, IDLE) == 0


@pytest.mark.timeout(60)
def test_drain_ends_kept_backends_and_keeps_none(l5pgd, cluster):
    """SIGINT's drain refuses new sessions, so a kept backend could only hold a slot of
    max_connections that a rolling restart's next l5pgd (or a direct client) may need: those
    kept end when the drain begins, and a client leaving during it gives nothing back."""
    d = l5pgd.start()
    kept, _ = kept_backend(d, new_app())
    app = new_app()  # another slot: not the kept one
    leaving, _ = raw_connect(d, app)
    leaving_pid = raw_pid(leaving)
    s, _ = raw_connect(d, app)  # holds the drain up
    in_use = raw_pid(s)
    os.kill(d.pid(), signal.SIGINT)
    wait_backend_gone(cluster, kept)
    pgwire.terminate(leaving)
    leaving.close()
    wait_backend_gone(cluster, leaving_pid)
    assert d.alive(), "the drain ended with a session still open"
    assert pool_metric(d, IDLE) == 0
    pgwire.terminate(s)
    s.close()
    assert d.proc.wait(timeout=WAIT) == 0, "the drain did not end with its last session"
    l5pgd.running.remove(d)
    wait_backend_gone(cluster, in_use)


@pytest.mark.timeout(60)
def test_killed_client_gives_nothing_back(l5pgd, cluster):
    cluster.sql("create table if not exists pool_tx (note text)")
    d = l5pgd.start()
    target = unix_target(d)
    app, tag = new_app(), uuid.uuid4().hex
    p = popen(psql_cmd("-q", "-f", "-"), target, env={"PGAPPNAME": app}, text=True,
              stdin=subprocess.PIPE)
    try:
        p.stdin.write(f"begin;\ninsert into pool_tx values ('{tag}');\nselect pg_sleep(600);\n")
        p.stdin.flush()  # stdin stays open: psql waits for more script
        first = wait_for_backend(cluster, app)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        wait_backend_gone(cluster, first)
    finally:
        stop_process(p)
    assert rows_tagged(cluster, tag) == 0
    assert pool_metric(d, RETURNED) == 0
    assert_logged_not_kept(d, "the client left without a Terminate message")
    assert backend_pid(target, app=app) != first


@pytest.mark.timeout(60)
def test_client_leaving_during_the_reuse_check_gives_the_backend_back(l5pgd, cluster):
    """A client that leaves while its kept backend is being checked before reuse, having sent
    nothing but its StartupMessage, does not cost the pool that backend: it goes back, clean,
    and the next client gets it."""
    d = l5pgd.start()
    app = new_app()
    pid, _ = kept_backend(d, app)
    os.kill(pid, signal.SIGSTOP)  # the check's answer waits
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect(str(d.socket_path))
        s.sendall(pgwire.startup_packet(application_name=app))
        wait_idle(d, 0)  # taken for the check
        s.close()  # a Unix socket: l5pgd's end reads EOF from now on
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_idle(d, 1)
    s, _ = raw_connect(d, app)
    assert raw_pid(s) == pid
    pgwire.terminate(s)
    s.close()


# -- who may share ---------------------------------------------------------------------------

# How the second client's startup differs from the first's (libpq environment), and what it
# must then see as `current_user current_database() application_name`.
DIFFERENT = {
    "application_name": ({"PGAPPNAME": "{app}-other"}, "postgres postgres {app}-other"),
    "role": ({"PGUSER": OTHER_ROLE}, f"{OTHER_ROLE} postgres {{app}}"),
    "database": ({"PGDATABASE": OTHER_DB}, f"postgres {OTHER_DB} {{app}}"),
}


@pytest.mark.parametrize("differs_in", list(DIFFERENT))
def test_different_startup_never_shares(l5pgd, other_role_and_db, differs_in):
    d = l5pgd.start(ident_rules=[("root", "postgres"), ("root", OTHER_ROLE)])
    target = unix_target(d)
    app = new_app()
    env, identity = DIFFERENT[differs_in]
    env = {k: v.format(app=app) for k, v in env.items()}
    first = backend_pid(target, app=app)
    wait_idle(d, 1)
    lines = psql_lines(target, "select pg_backend_pid()",
                       "select current_user || ' ' || current_database() || ' ' "
                       "|| current_setting('application_name')", app=app, env=env)
    assert lines[1] == identity.format(app=app)
    assert int(lines[0]) != first, f"a client with another {differs_in} got the kept backend"
    assert pool_metric(d, REUSED) == 0
    # Both are kept, each for clients like its own.
    wait_idle(d, 2)
    assert backend_pid(target, app=app) == first


# Scripts run as another OS user: connect to l5pgd's Unix socket (argv[1]) and send the
# StartupMessage given in hex (argv[2]); message() reads one message: (type, body).
PROBE_PROLOGUE = r"""
import json, socket, struct, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(20)
s.connect(sys.argv[1])
s.sendall(bytes.fromhex(sys.argv[2]))
def recv(n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError(buf)
        buf += chunk
    return buf
def message():
    head = recv(5)
    return chr(head[0]), recv(struct.unpack("!I", head[1:])[0] - 4)
"""

# Prints the first answer (ErrorResponse's SQLSTATE, or the message type).
STARTUP_PROBE = PROBE_PROLOGUE + r"""
kind, body = message()
out = {"type": kind}
if kind == "E":
    fields = {p[:1].decode(): p[1:].decode() for p in body.split(b"\0") if p}
    out.update(sqlstate=fields.get("C"), message=fields.get("M"))
print(json.dumps(out))
"""


def run_as_nobody(d, probe, startup):
    """Runs `probe` as OS user nobody against `d` with the StartupMessage `startup`."""
    r = subprocess.run([PYTHON, "-c", probe, str(d.socket_path), startup.hex()],
                       user="nobody", capture_output=True, text=True, timeout=60, cwd="/")
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="connects as OS user nobody: needs root")
def test_client_failing_the_check_never_gets_a_kept_backend(l5pgd):
    """The ident map lets root use role postgres, not nobody: nobody's byte-identical
    StartupMessage is refused, and the kept backend stays for root."""
    d = l5pgd.start()
    app = new_app()
    first, _ = kept_backend(d, app)
    startup = pgwire.startup_packet(application_name=app)
    out = json.loads(run_as_nobody(d, STARTUP_PROBE, startup))
    assert out.get("sqlstate") == "28000", out
    assert pool_metric(d, REUSED) == 0
    assert pool_metric(d, IDLE) == 1
    s, _ = raw_connect(d, app)
    assert raw_pid(s) == first
    pgwire.terminate(s)
    s.close()


# Logs in and prints the process id of the backend it got.
BACKEND_PID_PROBE = PROBE_PROLOGUE + r"""
while message()[0] != "Z":
    pass
sql = b"select pg_backend_pid()\0"
s.sendall(b"Q" + struct.pack("!I", len(sql) + 4) + sql)
while True:
    kind, body = message()
    if kind == "D":
        print(body[6:].decode())
    if kind == "Z":
        break
s.sendall(b"X\0\0\0\4")
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="connects as OS user nobody: needs root")
def test_another_os_user_of_the_same_role_gets_a_backend_of_its_own(l5pgd):
    """root and nobody may both use role postgres (the ident map says so). root's kept
    backend is not handed to nobody's byte-identical StartupMessage: what DISCARD ALL leaves
    in a backend (a dblink connection made with a password, PL/Python globals) would reach
    a user who would not get it connecting directly. nobody gets a backend of its own, kept
    for nobody."""
    d = l5pgd.start(ident_rules=[("root", "postgres"), ("nobody", "postgres")])
    app = new_app()
    first, _ = kept_backend(d, app)
    startup = pgwire.startup_packet(application_name=app)
    assert int(run_as_nobody(d, BACKEND_PID_PROBE, startup)) != first, \
        "nobody got root's kept backend"
    assert pool_metric(d, REUSED) == 0
    wait_idle(d, 2)  # each kept for its own user
    s, _ = raw_connect(d, app)
    assert raw_pid(s) == first
    pgwire.terminate(s)
    s.close()


# -- cancel ----------------------------------------------------------------------------------

BACKEND_KEY_SCRIPT = r"""
import json, psycopg
with psycopg.connect("", autocommit=True) as conn:
    real = conn.execute("select pg_backend_pid()").fetchone()[0]
    print(json.dumps({"key_pid": conn.info.backend_pid, "real_pid": real}))
"""


def test_client_gets_a_backend_key_of_its_own(l5pgd):
    d = l5pgd.start()
    out, _ = run_python_json(unix_target(d), BACKEND_KEY_SCRIPT, env={"PGAPPNAME": new_app()})
    assert out["key_pid"] != out["real_pid"], \
        f"the client got the backend's own key: {out}"


# psycopg2: prints its backend's pid and the pid of its key, then runs pg_sleep(30) and
# cancels it (PQcancel) once a line arrives on stdin; prints the outcome and leaves cleanly.
CANCEL_SCRIPT = r"""
import json, sys, threading, psycopg2, psycopg2.extensions
conn = psycopg2.connect("")
conn.autocommit = True
cur = conn.cursor()
cur.execute("select pg_backend_pid()")
print(json.dumps({"real_pid": cur.fetchone()[0], "key_pid": conn.get_backend_pid()}), flush=True)
def canceller():
    sys.stdin.readline()
    conn.cancel()
threading.Thread(target=canceller, daemon=True).start()
out = {}
try:
    cur.execute("select pg_sleep(30)")
    out["result"] = "completed"
except psycopg2.extensions.QueryCanceledError as e:
    out["result"], out["message"] = "canceled", str(e)
except Exception as e:
    out["result"], out["message"] = type(e).__name__, str(e)
cur.execute("select 5")
out["after"] = cur.fetchone()[0]
conn.close()
print(json.dumps(out), flush=True)
"""


def cancel_own_sleep(d, cluster, app):
    """Runs CANCEL_SCRIPT through l5pgd's Unix socket; returns (pids, outcome)."""
    p = popen([PYTHON, "-c", CANCEL_SCRIPT], unix_target(d), env={"PGAPPNAME": app}, text=True,
              stdin=subprocess.PIPE)
    try:
        line = p.stdout.readline()
        if not line:
            pytest.fail(f"the cancel script ended early: {p.communicate(timeout=WAIT)[1]}")
        pids = json.loads(line)
        wait_for_backend(cluster, app)
        p.stdin.write("cancel\n")
        p.stdin.flush()
        out, err = p.communicate(timeout=WAIT)
        assert p.returncode == 0, err
        return pids, json.loads(out.strip().splitlines()[-1])
    finally:
        stop_process(p)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("attempt", ["fresh", "reused"])
def test_pqcancel_works_on_fresh_and_reused_session(l5pgd, cluster, attempt):
    d = l5pgd.start()
    app = new_app()
    first = None
    if attempt == "reused":
        first = backend_pid(unix_target(d), app=app)
        wait_idle(d, 1)
    pids, out = cancel_own_sleep(d, cluster, app)
    if first is not None:
        assert pids["real_pid"] == first, "the session was not reused"
    assert pids["key_pid"] != pids["real_pid"], pids
    assert out["result"] == "canceled", (attempt, out)
    assert "canceling statement due to user request" in out["message"]
    assert out["after"] == 5


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["unix", "shm"])
def test_psql_sigint_cancels_on_a_reused_session(l5pgd, cluster, request, transport):
    d = l5pgd.start()
    target = transport_target(request, d, transport)
    app = new_app()
    first = backend_pid(target, app=app)
    wait_idle(d, 1)
    p = popen(psql_cmd("-c", "select pg_sleep(30)"), target, env={"PGAPPNAME": app}, text=True)
    try:
        assert wait_for_backend(cluster, app) == first, "not reused"
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=WAIT)
        assert p.returncode != 0
        assert "canceling statement due to user request" in err, err
    finally:
        stop_process(p)


@pytest.mark.timeout(90)
def test_previous_clients_key_does_not_cancel_the_next_client(l5pgd, cluster):
    d = l5pgd.start()
    app = new_app()
    first, old_key = kept_backend(d, app)

    s2, key = raw_connect(d, app)
    try:
        assert raw_pid(s2) == first, "not reused"
        assert key != old_key, "the next client got the previous client's key"
        # The old key, while the reused backend runs the next client's statement: nothing.
        send_query(s2, "select pg_sleep(3)")
        assert wait_for_backend(cluster, app) == first
        send_cancel(d, old_key)
        rows, error = read_result(s2)
        assert error is None, f"the previous client's key canceled the next client: {error}"
        assert rows == [[""]]
        # The next client's own key does cancel (the request path works).
        cancel_sleep(d, cluster, s2, app, key)
        pgwire.terminate(s2)
    finally:
        s2.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("canceller", ["waits_for_the_close", "closes_at_once"])
def test_cancel_postgres_has_not_taken_yet_keeps_the_backend_from_the_pool(
        l5pgd, cluster, canceller):
    """A cancel counts as on its way until Postgres closes its connection (having signalled
    the backend), as libpq's PQcancel() waits for, not from the moment its bytes were written:
    a postmaster slow to fork (stopped here) takes them from its accept queue later, and by
    then a backend kept more than 5 s after the write served the next client, whose query the
    old cancel hit."""
    d = l5pgd.start()
    app = new_app()
    s, key = raw_connect(d, app)
    postmaster = int((cluster.data_dir / "postmaster.pid").read_text().split()[0])
    c = socket.socket(socket.AF_UNIX)
    c.settimeout(WAIT)
    c.connect(str(d.socket_path))
    os.kill(postmaster, signal.SIGSTOP)
    try:
        forwarded = d.metric("l5pg_cancel_requests_total", result="forwarded")
        c.sendall(struct.pack("!II", 16, CANCEL_REQUEST_CODE) + key)
        wait_for(lambda: d.metric("l5pg_cancel_requests_total", result="forwarded") > forwarded,
                 WAIT, "l5pgd to write the cancel to Postgres")
        if canceller == "closes_at_once":
            c.close()
        else:
            assert not pgwire.at_eof(c, 6), "closed before Postgres took the cancel"
        time.sleep(6 if canceller == "closes_at_once" else 0)  # past the 5 s after the write
        pgwire.terminate(s)
        s.close()
        assert_logged_not_kept(d, "a cancel request for it is on its way")
        assert pool_metric(d, IDLE) == 0
    finally:
        os.kill(postmaster, signal.SIGCONT)
    if canceller == "waits_for_the_close":
        assert pgwire.at_eof(c, WAIT), "l5pgd kept the cancel connection open"
    c.close()


@pytest.mark.timeout(120)
def test_cancel_postgres_did_not_take_within_the_drain_timeout_keeps_the_backend_from_the_pool(
        l5pgd, cluster):
    """l5pgd waits limits.drain_timeout_ms for Postgres to close a cancel connection; when it
    gives up, the postmaster may still take the request from its accept queue later: that
    cancel is not counted as settled, and its backend is not kept when its client leaves."""
    d = l5pgd.start(extra=["limits.drain_timeout_ms=1000"])
    app = new_app()
    s, key = raw_connect(d, app)
    postmaster = int((cluster.data_dir / "postmaster.pid").read_text().split()[0])
    os.kill(postmaster, signal.SIGSTOP)
    try:
        send_cancel(d, key)
        wait_for(lambda: "did not close the connection in time" in d.log_text(), WAIT,
                 "the cancel's session to give up waiting for Postgres")
        time.sleep(6)  # past the 5 s a settled cancel keeps its backend from the pool
        pgwire.terminate(s)
        s.close()
        assert_logged_not_kept(d, "a cancel request for it is on its way, was sent in the last "
                               "seconds, or was not seen taken by Postgres")
        assert pool_metric(d, IDLE) == 0
    finally:
        os.kill(postmaster, signal.SIGCONT)


def test_terminate_closes_the_client_connection_and_keeps_the_backend(l5pgd):
    """Postgres closes a connection after Terminate; so does l5pgd, for a client that waits
    for that instead of closing first, and it keeps the backend all the same."""
    d = l5pgd.start()
    app = new_app()
    s, _ = raw_connect(d, app)
    try:
        first = raw_pid(s)
        pgwire.terminate(s)
        s.settimeout(WAIT)
        assert s.recv(1) == b"", "l5pgd did not close the connection after Terminate"
    finally:
        s.close()
    wait_idle(d, 1)
    s2, _ = raw_connect(d, app)
    try:
        assert raw_pid(s2) == first, "the backend was not kept"
        pgwire.terminate(s2)
    finally:
        s2.close()


# -- never pooled ----------------------------------------------------------------------------

def assert_not_kept(d, cluster, target, app):
    """Two successive clients: the first's backend ends, the second gets another one."""
    first = backend_pid(target, app=app)
    wait_backend_gone(cluster, first)
    assert backend_pid(target, app=app) != first
    assert pool_metric(d, RETURNED) == 0
    assert pool_metric(d, IDLE) == 0


def test_default_configuration_does_not_pool(l5pgd, cluster):
    d = l5pgd.start(pool=None)
    assert_not_kept(d, cluster, unix_target(d), new_app())


def test_admin_console_is_never_pooled(l5pgd):
    d = l5pgd.start()
    target = unix_target(d)
    app = new_app()
    first = backend_pid(target, app=app)
    wait_idle(d, 1)
    for _ in range(2):
        out = psql(target, "show version", dbname="l5pgd", env={"PGAPPNAME": app})
        assert out.startswith("l5pgd "), out
    wait_for(lambda: sum(d.metric("l5pg_sessions_active", transport=t)
                         for t in ("unix", "shm", "tcp")) == 0, WAIT, "the console sessions to end")
    assert pool_metric(d, RETURNED) == 1
    assert pool_metric(d, REUSED) == 0
    assert pool_metric(d, IDLE) == 1
    assert backend_pid(target, app=app) == first


def test_show_pools_lists_kept_backends(l5pgd):
    """The admin console's SHOW POOLS: per database and role, the sessions now and the
    server connections kept idle."""
    d = l5pgd.start()
    target = unix_target(d)
    backend_pid(target, app=new_app())
    wait_idle(d, 1)
    rows = psql(target, "show pools", dbname="l5pgd").splitlines()
    # The console's own session is listed too (database l5pgd), with nothing kept for it.
    assert "postgres|postgres|0|1" in rows, rows
    assert "l5pgd|postgres|1|0" in rows, rows


# -- settings --------------------------------------------------------------------------------

def test_idle_timeout_closes_idle_backend(l5pgd, cluster):
    d = l5pgd.start(extra=["pool.idle_timeout_ms=300"])
    target = unix_target(d)
    app = new_app()
    first = backend_pid(target, app=app)
    wait_pool(d, RETURNED, lambda v: v == 1, "== 1")
    wait_idle(d, 0)
    wait_backend_gone(cluster, first)
    assert backend_pid(target, app=app) != first


@pytest.mark.timeout(90)
def test_max_idle_caps_idle_backends(l5pgd, cluster):
    d = l5pgd.start(extra=["pool.max_idle=1"])
    target = unix_target(d)
    app = new_app()
    clients = [popen(psql_cmd("-q", "-f", "-"), target, env={"PGAPPNAME": app}, text=True,
                     stdin=subprocess.PIPE) for _ in range(3)]
    try:
        for p in clients:
            p.stdin.write("select pg_backend_pid();\n")
            p.stdin.flush()
        wait_for(lambda: cluster.sql("select count(*) from pg_stat_activity "
                                     f"where application_name = '{app}'") == "3",
                 WAIT, "3 clients connected at once")
        for p in clients:
            p.stdin.close()  # all three leave together
        pids = []
        for p in clients:
            out, err = p.stdout.read(), p.stderr.read()  # tiny: no pipe fills up
            assert p.wait(timeout=WAIT) == 0, err
            pids.append(int(out.strip()))
    finally:
        for p in clients:
            stop_process(p)
    assert len(set(pids)) == 3, pids

    def alive():
        return [pid for pid in pids if backend_alive(cluster, pid)]

    wait_for(lambda: pool_metric(d, IDLE) == 1 and len(alive()) == 1, WAIT,
             f"one idle backend kept, the others closed ({pool_metric(d, IDLE)} idle, "
             f"alive {alive()})")
    time.sleep(1)  # and it stays so
    assert pool_metric(d, IDLE) == 1
    assert len(alive()) == 1, alive()


def start_from_file_with_one_kept(l5pgd):
    """An l5pgd configured by a file (pool.mode session) that keeps one backend:
    (daemon, its config file, target, application_name, the kept backend's pid)."""
    base = Path(tempfile.mkdtemp(prefix="poolcfg-", dir=l5pgd.workdir))
    config = base / "l5pgd.yaml"
    config.write_text("pool:\n  mode: session\n")
    d = l5pgd.start(pool=None, config_file=config)
    target = unix_target(d)
    app = new_app()
    first = backend_pid(target, app=app)
    wait_idle(d, 1)
    return d, config, target, app, first


def test_reload_to_none_closes_idle_backends(l5pgd, cluster):
    d, config, target, app, first = start_from_file_with_one_kept(l5pgd)
    config.write_text("pool:\n  mode: none\n")
    log = d.reload()
    assert "reload: pool.mode: session -> none" in log, log
    wait_idle(d, 0)
    wait_backend_gone(cluster, first)
    # And nothing is kept any more.
    second = backend_pid(target, app=app)
    assert second != first
    wait_backend_gone(cluster, second)
    assert pool_metric(d, IDLE) == 0


def test_reload_pointing_upstream_elsewhere_closes_idle_backends(l5pgd, cluster):
    """Kept backends belong to the server they were opened on (a failover reload)."""
    d, config, target, app, first = start_from_file_with_one_kept(l5pgd)
    # The same server over TCP instead of its Unix socket: a change all the same.
    config.write_text(f"pool:\n  mode: session\nupstream:\n  host: {cluster.host}\n")
    d.reload()
    wait_idle(d, 0)
    wait_backend_gone(cluster, first)
    assert backend_pid(target, app=app) != first


@pytest.mark.parametrize("limit", ["idle_timeout_ms: 200", "server_lifetime_ms: 200", "max_idle: 0"])
def test_reload_lowering_a_limit_applies_to_kept_backends(l5pgd, cluster, limit):
    d, config, target, app, first = start_from_file_with_one_kept(l5pgd)
    config.write_text(f"pool:\n  mode: session\n  {limit}\n")
    d.reload()
    wait_idle(d, 0)
    wait_backend_gone(cluster, first)


def test_backend_in_use_across_a_reload_pointing_upstream_elsewhere_is_not_kept(l5pgd, cluster):
    """A client still connected when upstream.* changes: its backend, on the old server, is
    not kept when it leaves."""
    d, config, target, app, _ = start_from_file_with_one_kept(l5pgd)
    s, _ = raw_connect(d, app)
    in_use = raw_pid(s)
    refreshed = d.log_text().count("worker 0: new settings")
    config.write_text(f"pool:\n  mode: session\nupstream:\n  host: {cluster.host}\n")
    d.reload()
    wait_for(lambda: d.log_text().count("worker 0: new settings") > refreshed, WAIT,
             "the worker to take the new settings")
    pgwire.terminate(s)
    s.close()
    wait_backend_gone(cluster, in_use)
    assert_logged_not_kept(d, "a reload pointed upstream.* elsewhere since it connected")
    assert pool_metric(d, RETURNED) == 1  # the first client's, before the reload


# -- robustness ------------------------------------------------------------------------------

def test_backend_terminated_while_idle_is_not_handed_out(l5pgd, cluster):
    """pg_terminate_backend() of a kept backend: the next client gets a working session on
    another backend, not the dead one's FATAL."""
    d = l5pgd.start()
    target = unix_target(d)
    app = new_app()
    first = backend_pid(target, app=app)
    wait_idle(d, 1)
    assert cluster.sql(f"select pg_terminate_backend({first})") == "t"
    wait_backend_gone(cluster, first)
    try:
        wait_idle(d, 0, timeout=5)  # l5pgd may notice now, or only when it hands one out
    except AssertionError:
        pass
    assert backend_pid(target, app=app) != first


@pytest.mark.timeout(180)
@pytest.mark.parametrize("transport", ["unix", "shm"])
def test_pgbench_twice_reuses_backends(l5pgd, pgbench_db, request, transport):
    """pgbench -M prepared prepares the same statement names in every session: the second run
    fails unless each kept backend was reset."""
    d = l5pgd.start()
    target = transport_target(request, d, transport)
    args = ["-S", "-M", "prepared", "-c", 4, "-j", 2, "-t", 200, "-n"]
    first = pgbench(target, args)
    assert (first.processed, first.failed) == (800, 0), first.stdout
    wait_pool(d, IDLE, lambda v: v >= 4, ">= 4")
    reused = pool_metric(d, REUSED)
    second = pgbench(target, args)
    assert (second.processed, second.failed) == (800, 0), second.stdout
    assert pool_metric(d, REUSED) >= reused + 4


# -- what Postgres checks only at login, asked again before a kept backend is reused --------

REUSE_REFUSED = "l5pg_pool_reuse_refused_total"


@pytest.fixture
def login_role(cluster):
    """A login role of this test's own, with a database only it may connect to."""
    role = f"l5pg_pool_chk_{uuid.uuid4().hex[:8]}"
    cluster.sql(f"create role {role} login")
    cluster.sql(f"create database {role}")
    cluster.sql(f"revoke connect on database {role} from public; "
                f"grant connect on database {role} to {role}")
    yield role
    for sql in (f"drop database if exists {role} with (force)", f"drop role if exists {role}",
                f"drop role if exists {role}_old"):
        try:
            cluster.sql(sql)
        except RuntimeError:
            pass


def kept_backend_of(l5pgd, cluster, role):
    """An l5pgd that may open `role`, and the pid of the backend it keeps after a first client
    of that role (reused by a second, while nothing changed)."""
    d = l5pgd.start(ident_rules=[("root", "postgres"), ("root", role)])
    target, app, env = unix_target(d), new_app(), {"PGUSER": role, "PGDATABASE": role}
    first = backend_pid(target, app=app, env=env)
    wait_idle(d, 1)
    assert backend_pid(target, app=app, env=env) == first, "not reused while nothing changed"
    wait_idle(d, 1)
    assert pool_metric(d, REUSE_REFUSED) == 0
    return d, target, app, env, first


ENDED_FOR_ROOM = "l5pg_pool_ended_for_room_total"
MAY_NOT_LOG_IN = "its role may no longer log in"
AT_LIMIT = "its role or database has reached its CONNECTION LIMIT"


@pytest.mark.parametrize("change, refusal, why", [
    ("alter role {role} nologin", 'role "{role}" is not permitted to log in', MAY_NOT_LOG_IN),
    ("revoke connect on database {role} from {role}", 'permission denied for database "{role}"',
     MAY_NOT_LOG_IN),
    ("alter database {role} allow_connections false",
     'database "{role}" is not currently accepting connections', MAY_NOT_LOG_IN),
    ("alter role {role} connection limit 0", 'too many connections for role "{role}"', AT_LIMIT),
    ("alter database {role} connection limit 0", 'too many connections for database "{role}"',
     AT_LIMIT),
], ids=["nologin", "connect_revoked", "connections_not_allowed", "role_limit", "database_limit"])
def test_kept_backend_is_not_reused_once_postgres_would_refuse_the_login(
        l5pgd, cluster, login_role, change, refusal, why):
    """The next client gets Postgres's own refusal, as on a direct connection, and the kept
    backend is closed. (The connection limits were not asked: a role or database limited to
    0 after its backend was kept went on being served.)"""
    d, target, app, env, first = kept_backend_of(l5pgd, cluster, login_role)
    cluster.sql(change.format(role=login_role))
    r = psql_lines(target, "select 1", app=app, env=env, check=False)
    assert r.returncode != 0, r.stdout
    assert refusal.format(role=login_role) in r.stderr, r.stderr
    assert pool_metric(d, REUSE_REFUSED) == 1
    wait_backend_gone(cluster, first)
    assert pool_metric(d, IDLE) == 0
    assert f"not reused: {why}" in d.log_text()


def test_kept_backend_running_as_a_renamed_role_is_not_reused(l5pgd, cluster, login_role):
    """options -c role=...: the role a kept backend runs as was renamed, and a new role took
    its name. A new login by that name runs as the new role, so the kept backend, still running
    as the renamed one, is not reused (it was)."""
    d = l5pgd.start()
    target, app = unix_target(d), new_app()
    env = {"PGOPTIONS": f"-c role={login_role}"}
    first = backend_pid(target, app=app, env=env)
    wait_idle(d, 1)
    cluster.sql(f"alter role {login_role} rename to {login_role}_old; create role {login_role}")
    lines = psql_lines(target, "select pg_backend_pid()", "select current_user", app=app, env=env)
    assert int(lines[0]) != first
    assert lines[-1] == login_role
    assert pool_metric(d, REUSE_REFUSED) == 1


def test_kept_backend_within_its_connection_limit_is_reused(l5pgd, cluster, login_role):
    """A limit of 1: the kept backend is the one connection a new login would count (as
    Postgres counts the new backend itself), so it is reused, again and again."""
    cluster.sql(f"alter role {login_role} connection limit 1; "
                f"alter database {login_role} connection limit 1")
    d, target, app, env, first = kept_backend_of(l5pgd, cluster, login_role)
    assert backend_pid(target, app=app, env=env) == first
    assert pool_metric(d, REUSE_REFUSED) == 0


@pytest.mark.parametrize("limit", ["role", "database"])
def test_kept_backend_of_another_client_makes_room_at_the_connection_limit(
        l5pgd, cluster, login_role, limit):
    """At a CONNECTION LIMIT of 1, a client with another StartupMessage (another
    application_name) cannot reuse the kept backend, and Postgres refuses it a second one.
    Connecting directly it would log in (the first client is gone): l5pgd ends the kept
    backend and logs the client in on a new one (the client used to get the 53300)."""
    cluster.sql(f"alter {limit} {login_role} connection limit 1")
    d, target, app, env, first = kept_backend_of(l5pgd, cluster, login_role)
    other = backend_pid(target, app=new_app(), env=env)
    assert other != first
    assert not backend_alive(cluster, first)
    assert f"ending a kept one (backend pid {first}) to make room" in d.log_text()
    wait_idle(d, 1)  # the new client's backend, kept in turn
    assert pool_metric(d, REUSE_REFUSED) == 0
    assert pool_metric(d, ENDED_FOR_ROOM) == 1


@pytest.mark.serial  # the other worker must act within 0.5 s: another test's load could delay it
def test_kept_backend_of_another_worker_makes_room_at_the_connection_limit(
        l5pgd, cluster, login_role):
    """As above, with the kept backend in the other worker's pool: the worker serving the
    new client asks the other to end it. (A client goes to the worker with the fewest
    sessions: a session held open in the first sends the second client to the other.)"""
    cluster.sql(f"alter role {login_role} connection limit 1")
    d = l5pgd.start(workers=2, ident_rules=[("root", "postgres"), ("root", login_role)])
    target, env = unix_target(d), {"PGUSER": login_role, "PGDATABASE": login_role}
    first = backend_pid(target, app=new_app(), env=env)
    wait_idle(d, 1)
    wait_pool(d, "l5pg_sessions_active", lambda v: v == 0, "== 0")  # its session is gone
    holder, _ = raw_login(d, new_app())  # the first worker's session, as postgres
    try:
        other = backend_pid(target, app=new_app(), env=env)
    finally:
        holder.close()
    assert other != first
    assert not backend_alive(cluster, first)
    log = d.log_text()
    assert "asking the other workers to end a kept one" in log, log
    assert f"ending a kept server connection (backend pid {first}) to make room" in log, log
    assert pool_metric(d, ENDED_FOR_ROOM) == 1


def test_a_hopeless_refusal_ends_one_unrelated_kept_backend_at_most(l5pgd, cluster, login_role):
    """A role at CONNECTION LIMIT 0 is refused whatever l5pgd ends. Kept backends of other
    roles and databases make room only under max_connections, which l5pgd cannot tell from the
    refusal (Postgres translates its messages): one at most goes, and the client gets
    Postgres's refusal."""
    cluster.sql(f"alter role {login_role} connection limit 0")
    d = l5pgd.start(ident_rules=[("root", "postgres"), ("root", login_role)])
    target = unix_target(d)
    kept = [backend_pid(target, app=new_app()) for _ in range(2)]  # as postgres
    wait_idle(d, 2)
    r = psql_lines(target, "select 1", app=new_app(),
                   env={"PGUSER": login_role, "PGDATABASE": login_role}, check=False)
    assert r.returncode != 0, r.stdout
    assert f'too many connections for role "{login_role}"' in r.stderr, r.stderr
    wait_idle(d, 1)
    wait_for(lambda: sorted(backend_alive(cluster, pid) for pid in kept) == [False, True], WAIT,
             "one kept backend to end, the other to stay")
    assert pool_metric(d, ENDED_FOR_ROOM) == 1


def test_kept_backend_counts_other_roles_sessions_against_the_database_limit(
        l5pgd, cluster, login_role):
    """A session of another role (here a superuser's, straight to Postgres) counts against the
    database's CONNECTION LIMIT, though the kept backend's role may not read its backend_type
    in pg_stat_activity (it was left out: the limit lowered to 1 while the other session held
    a slot went on being ignored)."""
    cluster.sql(f"alter database {login_role} connection limit 2")
    d, target, app, env, first = kept_backend_of(l5pgd, cluster, login_role)
    holder_app = f"{app}-holder"
    holder = popen(psql_cmd("-c", "select pg_sleep(30)"), direct_unix_target(cluster), text=True,
                   env={"PGDATABASE": login_role, "PGAPPNAME": holder_app})
    try:
        wait_for_backend(cluster, holder_app)
        cluster.sql(f"alter database {login_role} connection limit 1")
        r = psql_lines(target, "select 1", app=app, env=env, check=False)
        assert r.returncode != 0, r.stdout
        assert f'too many connections for database "{login_role}"' in r.stderr, r.stderr
        assert f"not reused: {AT_LIMIT}" in d.log_text()
    finally:
        stop_process(holder)


@pytest.fixture
def autovacuum_naptime_1s(cluster):
    """Autovacuum looks at each database every second while the test runs."""
    cluster.sql("alter system set autovacuum_naptime = '1s'")
    cluster.sql("select pg_reload_conf()")
    yield
    cluster.sql("alter system reset autovacuum_naptime")
    cluster.sql("select pg_reload_conf()")


@pytest.mark.timeout(180)
def test_autovacuum_at_work_does_not_count_against_the_database_limit(
        l5pgd, cluster, login_role, autovacuum_naptime_1s):
    """Postgres 15 admits a login to a database at its CONNECTION LIMIT of 1 while an
    autovacuum worker works there (tried by hand on 15.18), so the kept backend is reused then
    too. A role that may read every session's statistics
    (pg_read_all_stats, pg_monitor) sees the worker as "autovacuum worker" in pg_stat_activity:
    counting it, as a review once proposed, would refuse the reuse and keep no backend there."""
    cluster.sql(f"grant pg_read_all_stats to {login_role}")
    cluster.sql(f"alter database {login_role} connection limit 1")
    d, target, app, env, first = kept_backend_of(l5pgd, cluster, login_role)
    # Dead rows that autovacuum takes a minute to clean, sleeping 100 ms every page or so.
    cluster.sql("create table l5pg_dead (i int) with (autovacuum_vacuum_threshold = 0, "
                "autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_cost_delay = 100, "
                "autovacuum_vacuum_cost_limit = 1); "
                "insert into l5pg_dead select generate_series(1, 200000); delete from l5pg_dead",
                dbname=login_role)
    autovacuum_there = ("select count(*) from pg_stat_activity where backend_type = "
                        f"'autovacuum worker' and datname = '{login_role}'")
    wait_for(lambda: cluster.sql(autovacuum_there) == "1", 90, "autovacuum to work there")
    assert backend_pid(target, app=app, env=env) == first
    assert cluster.sql(autovacuum_there) == "1", "autovacuum ended before the reuse"
    assert pool_metric(d, REUSE_REFUSED) == 0


def test_kept_backend_of_a_renamed_role_is_not_reused(l5pgd, cluster, login_role):
    """The role was renamed and a new one took its name: a new login by that name is the new
    role, so the next client must not get the old role's backend (nor its rights)."""
    d, target, app, env, first = kept_backend_of(l5pgd, cluster, login_role)
    cluster.sql(f"alter role {login_role} rename to {login_role}_old")
    cluster.sql(f"create role {login_role} login; "
                f"grant connect on database {login_role} to {login_role}")
    out = psql_lines(target, "select session_user, pg_backend_pid()", app=app, env=env)[-1]
    user, pid = out.split("|")
    assert user == login_role and int(pid) != first, out
    assert pool_metric(d, REUSE_REFUSED) == 1
    assert "not reused: its role or database was renamed" in d.log_text()


def test_kept_backend_is_checked_for_its_login_role_not_the_role_it_runs_as(
        l5pgd, cluster, login_role):
    """ALTER ROLE ... SET role: the backend runs as another role, which may connect; Postgres
    checks CONNECT for the login role, and so must the check before reuse."""
    owner = f"{login_role}_owner"
    # NOINHERIT: the login role has only its own CONNECT, the role it runs as has its own.
    cluster.sql(f"create role {owner} nologin; grant connect on database {login_role} to {owner};"
                f" grant {owner} to {login_role}; alter role {login_role} noinherit;"
                f" alter role {login_role} set role = {owner}")
    try:
        d, target, app, env, first = kept_backend_of(l5pgd, cluster, login_role)
        assert psql_lines(target, "select current_user", app=app, env=env)[-1] == owner
        wait_idle(d, 1)
        cluster.sql(f"revoke connect on database {login_role} from {login_role}")
        r = psql_lines(target, "select 1", app=app, env=env, check=False)
        assert r.returncode != 0, r.stdout
        assert f'permission denied for database "{login_role}"' in r.stderr, r.stderr
        assert pool_metric(d, REUSE_REFUSED) == 1
    finally:
        cluster.sql(f"drop owned by {owner}; drop role if exists {owner}")


def test_kept_backend_is_not_reused_once_the_role_it_runs_as_is_revoked(
        l5pgd, cluster, login_role):
    """options -c role=...: Postgres checks the membership when a login sets it, and RESET ROLE
    returns to the role then resolved without asking again. After a REVOKE the next client
    gets Postgres's own refusal, as on a direct connection (it got the backend, running with
    the revoked role's rights)."""
    granted = f"{login_role}_granted"
    cluster.sql(f"create role {granted} nologin; grant {granted} to {login_role}")
    try:
        d = l5pgd.start(ident_rules=[("root", "postgres"), ("root", login_role)])
        target, app = unix_target(d), new_app()
        env = {"PGUSER": login_role, "PGDATABASE": login_role,
               "PGOPTIONS": f"-c role={granted}"}
        first = backend_pid(target, app=app, env=env)
        wait_idle(d, 1)
        lines = psql_lines(target, "select pg_backend_pid()", "select current_user", app=app,
                           env=env)
        assert (int(lines[0]), lines[-1]) == (first, granted), "not reused while nothing changed"
        wait_idle(d, 1)
        cluster.sql(f"revoke {granted} from {login_role}")
        r = psql_lines(target, "select current_user", app=app, env=env, check=False)
        assert r.returncode != 0, r.stdout
        assert "permission denied to set role" in r.stderr, r.stderr
        assert pool_metric(d, REUSE_REFUSED) == 1
        assert "not reused: its login role may no longer take the role it runs as" in d.log_text()
        wait_backend_gone(cluster, first)
    finally:
        cluster.sql(f"drop role if exists {granted}")


def test_kept_backend_of_a_demoted_superuser_is_not_reused(l5pgd, cluster, login_role):
    """Postgres 15 decides SET SESSION AUTHORIZATION by the superuser flag its login had: a
    kept backend of a role demoted since let its next client become any role."""
    cluster.sql(f"alter role {login_role} superuser")
    d, target, app, env, first = kept_backend_of(l5pgd, cluster, login_role)
    cluster.sql(f"alter role {login_role} nosuperuser")
    r = psql_lines(target, "select pg_backend_pid()", "set session authorization postgres",
                   app=app, env=env, check=False)
    assert int(r.stdout.split()[0]) != first, r.stdout
    assert "permission denied to set session authorization" in r.stderr, r.stderr
    assert pool_metric(d, REUSE_REFUSED) == 1
    assert "its SUPERUSER attribute, or the name of the role it runs as" in d.log_text()


@pytest.mark.parametrize("parameter, value", [("session_replication_role", "replica"),
                                              ("log_connections", "on")],
                         ids=["superuser", "superuser_backend"])
def test_backend_whose_client_set_a_superuser_only_parameter_is_not_kept(
        l5pgd, cluster, login_role, parameter, value):
    """GRANT SET ON PARAMETER lets a role set a superuser-only parameter at login, checked
    then only: its backend serves the client and is not kept, so a REVOKE holds for the next
    login."""
    cluster.sql(f"grant set on parameter {parameter} to {login_role}")
    try:
        d = l5pgd.start(ident_rules=[("root", "postgres"), ("root", login_role)])
        env = {"PGUSER": login_role, "PGDATABASE": login_role,
               "PGOPTIONS": f"-c {parameter}={value}"}
        assert psql_lines(unix_target(d), f"show {parameter}", app=new_app(),
                          env=env) == [value]
        wait_for(lambda: "login check at the start failed: its client set a superuser-only "
                         "parameter" in d.log_text(), WAIT, "the check to fail")
        assert pool_metric(d, IDLE) == 0
        # Without it the same role's backend is kept.
        backend_pid(unix_target(d), app=new_app(), env={k: v for k, v in env.items()
                                                        if k != "PGOPTIONS"})
        wait_idle(d, 1)
    finally:
        cluster.sql(f"revoke set on parameter {parameter} from {login_role}")


# ALTER ROLE / ALTER DATABASE ... SET: a login takes these when its backend starts, and a kept
# backend keeps them (DISCARD ALL restores them as they were then). l5pgd notes them when the
# backend starts and compares before each reuse; a custom setting (l5pg.tag) so that ALTER ROLE
# ALL touches nothing else in the cluster.
SETTINGS_CHANGED = "the settings a login of its role to its database takes"
SET_FOR = {
    "role": "alter role {role} set l5pg.tag = '{value}'",
    "database": "alter database {role} set l5pg.tag = '{value}'",
    "role_in_database": "alter role {role} in database {role} set l5pg.tag = '{value}'",
    "all_roles": "alter role all set l5pg.tag = '{value}'",
}


def role_session(d, role, app):
    """A raw client of `role` over l5pgd's Unix socket, logged in."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(60)
    s.connect(str(d.socket_path))
    s.sendall(pgwire.startup_packet(user=role, database=role, application_name=app))
    msgs = pgwire.read_until_ready(s)
    assert not [t for t, _ in msgs if t == "E"], msgs
    return s


def tag_and_pid(s):
    send_query(s, "select current_setting('l5pg.tag', true), pg_backend_pid()")
    rows, error = read_result(s)
    assert error is None, error
    return rows[0][0], int(rows[0][1])


def leave(s):
    pgwire.terminate(s)
    s.close()


@pytest.mark.parametrize("scope", list(SET_FOR))
@pytest.mark.parametrize("when", ["while_kept", "while_in_use"])
def test_kept_backend_is_not_reused_once_its_login_settings_changed(
        l5pgd, cluster, login_role, scope, when):
    """The next client gets the settings a direct login gets now, on a new backend. (They were
    renewed only by pool.server_lifetime_ms: an ALTER ROLE ... SET default_transaction_read_only
    or log_statement, say, did not reach a pool's clients for an hour.) A change made while the
    first client still held the backend counts too: what the backend started with is compared,
    not what the catalog said when it was kept."""
    d = l5pgd.start(ident_rules=[("root", "postgres"), ("root", login_role)])
    app, value = new_app(), f"v{uuid.uuid4().hex[:6]}"
    set_it = SET_FOR[scope].format(role=login_role, value=value)
    try:
        s = role_session(d, login_role, app)
        _, first = tag_and_pid(s)
        if when == "while_in_use":
            cluster.sql(set_it)
        leave(s)
        wait_idle(d, 1)
        if when == "while_kept":
            cluster.sql(set_it)
        s = role_session(d, login_role, app)
        tag, pid = tag_and_pid(s)
        leave(s)
        assert (tag, pid != first) == (value, True), (tag, pid, first)
        assert pool_metric(d, REUSE_REFUSED) == 1
        assert f"not reused: {SETTINGS_CHANGED}" in d.log_text()
        # The new backend started with them: it is kept, and reused while nothing changes.
        wait_idle(d, 1)
        s = role_session(d, login_role, app)
        assert tag_and_pid(s) == (value, pid)
        leave(s)
    finally:
        cluster.sql(set_it.split(" set ")[0] + " reset l5pg.tag")


def test_backend_whose_settings_cannot_be_read_serves_its_client_and_is_not_kept(
        l5pgd, cluster, login_role):
    """The login check right after a new backend's greeting fails with an ERROR (here the
    catalog made unreadable): the client is served as usual, never sees l5pgd's query or its
    error, and its backend is not kept, as nobody knows the settings it started with."""
    d = l5pgd.start(ident_rules=[("root", "postgres"), ("root", login_role)])
    app = new_app()
    # (A shared catalog's privileges are kept per database, in its pg_class.)
    cluster.sql("revoke select on pg_catalog.pg_db_role_setting from public", dbname=login_role)
    try:
        s = role_session(d, login_role, app)
        send_query(s, "select 'served'")
        rows, error = read_result(s)
        assert (rows, error) == ([["served"]], None)
        leave(s)
    finally:
        cluster.sql("grant select on pg_catalog.pg_db_role_setting to public", dbname=login_role)
    wait_for(lambda: "the settings it started with are not known" in d.log_text(), WAIT,
             "the session to end")
    assert "login check at the start failed: an error: permission denied" in d.log_text()
    assert pool_metric(d, IDLE) == 0


LOGIN_TRIGGER = "its database has a login event trigger"


def add_login_trigger(cluster, db):
    """A login event trigger in `db`, which runs at each login from Postgres 17 on. Postgres 15
    has none: there the catalog row CREATE EVENT TRIGGER ... ON login makes is inserted by a
    superuser, which Postgres 15 ignores (its event trigger cache skips events it does not
    know) and l5pgd must see all the same."""
    cluster.sql("create function l5pg_on_login() returns event_trigger language plpgsql "
                "as 'begin end'", dbname=db)
    if int(cluster.sql("show server_version_num")) >= 170000:
        cluster.sql("create event trigger l5pg_login on login "
                    "execute function l5pg_on_login()", dbname=db)
    else:
        cluster.sql("insert into pg_catalog.pg_event_trigger values ("
                    "(select coalesce(max(oid::int8), 16384) + 1 from pg_catalog.pg_event_trigger)"
                    "::oid, 'l5pg_login', 'login', 10, 'l5pg_on_login'::regproc, 'O', null)",
                    dbname=db)


def test_backends_of_a_database_with_a_login_event_trigger_are_not_kept(
        l5pgd, cluster, login_role):
    """A login event trigger (Postgres 17) runs when a backend starts: a client given a kept
    backend would skip it (an audit record, a refusal outside office hours) where a direct
    login runs it. Such a database's kept backend is not reused, a new one is not kept, and
    once the trigger is disabled its backends are kept again. (They were kept, and the trigger
    ran again only after pool.server_lifetime_ms.)"""
    d, target, app, env, first = kept_backend_of(l5pgd, cluster, login_role)
    add_login_trigger(cluster, login_role)
    second = backend_pid(target, app=app, env=env)
    assert second != first
    assert pool_metric(d, REUSE_REFUSED) == 1
    assert f"not reused: {LOGIN_TRIGGER}" in d.log_text()
    wait_for(lambda: f"login check at the start failed: {LOGIN_TRIGGER}" in d.log_text(), WAIT,
             "the check at the start to fail")
    wait_backend_gone(cluster, second)
    assert pool_metric(d, IDLE) == 0
    assert backend_pid(target, app=app, env=env) not in (first, second)

    cluster.sql("alter event trigger l5pg_login disable", dbname=login_role)
    third = backend_pid(target, app=app, env=env)
    wait_idle(d, 1)
    assert backend_pid(target, app=app, env=env) == third


# -- what a pooled session costs l5pgd ---------------------------------------------------------

# A pooled session walks a copy of what its client sends (to know when the backend may be
# kept). An SHM client's record can be half its ring (8 MiB of a 16 MiB ring, as any client
# may ask), and the upstream socket takes a few hundred KiB of it per round: l5pgd used to
# copy and walk all that was left of the record every round, the square of its size. 16 MiB
# of 6-byte CopyData messages (outside a COPY, Postgres reads and ignores them) sent through
# a 16 MiB ring cost l5pgd 13 times the CPU of the same bytes through a 64 KiB ring (0.79 s
# against 0.06 s); now the same. A ratio within one test, so that sanitizer builds, which
# slow both, compare alike.
BIG_RECORDS_SCRIPT = r'''
import ctypes, json, socket, struct, sys
sys.path.insert(0, sys.argv[2])
from tests.harness import pgwire
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(pgwire.startup_packet(application_name="l5pg-big-records"))
pgwire.read_until_ready(s)
s.sendall((b"d" + struct.pack("!I", 5) + b"x") * (16 * 1024 * 1024 // 6))
sql = b"select 1\0"
s.sendall(b"Q" + struct.pack("!I", 4 + len(sql)) + sql)
pgwire.read_until_ready(s)
print(json.dumps({"transport": ctypes.CDLL(None).l5pg_fd_transport(s.fileno())}))
'''


@pytest.mark.timeout(300)
@pytest.mark.serial  # compares two CPU times of a spinning worker: a neighbour's load varies them
def test_pooled_shm_client_sending_big_records_costs_l5pgd_no_more(l5pgd, shim):
    d = l5pgd.start()

    def l5pgd_cpu(ring_size):
        before = cpu_seconds(d.pid())
        out, _ = run_python_json(make_target("shm", d), BIG_RECORDS_SCRIPT,
                                 args=[str(d.socket_path), str(paths.REPO)], timeout=140,
                                 env={"L5PG_RING_SIZE": ring_size})
        assert out["transport"] == 1, out  # L5PG_TRANSPORT_SHM
        return cpu_seconds(d.pid()) - before

    small, big = l5pgd_cpu(64 * 1024), l5pgd_cpu(16 * 1024 * 1024)
    figures = f"l5pgd CPU: {big:.2f} s through a 16 MiB ring, {small:.2f} s through 64 KiB"
    print(figures)
    assert big < 3 * max(small, 0.05), figures


# -- a pipelining SHM client with a small ring -----------------------------------------------

class CoalescingRelay:
    """A Unix socket in front of Postgres's (same port, its own directory) that holds what
    Postgres sends on a connection until `readies` ReadyForQuery messages have come, then
    passes it on in one send, and everything after as it comes: what l5pgd reads when
    Postgres answered a pipelining client before l5pgd read the greeting."""

    def __init__(self, directory, cluster, readies=2):
        self.target = str(Path(cluster.socket_dir) / f".s.PGSQL.{cluster.port}")
        self.readies = readies
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(str(Path(directory) / f".s.PGSQL.{cluster.port}"))
        self.listener.listen(8)
        self.sockets = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(self.target)
            self.sockets += [downstream, upstream]
            threading.Thread(target=self._pipe, args=(downstream, upstream), daemon=True).start()
            threading.Thread(target=self._hold_then_pipe, args=(upstream, downstream),
                             daemon=True).start()

    @staticmethod
    def _pipe(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def _hold_then_pipe(self, src, dst):
        held, seen, pos = b"", 0, 0
        try:
            while seen < self.readies:
                data = src.recv(65536)
                if not data:
                    break
                held += data
                while len(held) - pos >= 5:
                    (length,) = struct.unpack("!I", held[pos + 1:pos + 5])
                    if len(held) - pos < 1 + length:
                        break
                    seen += held[pos:pos + 1] == b"Z"
                    pos += 1 + length
            dst.sendall(held)
        except OSError:
            return
        self._pipe(src, dst)

    def close(self):
        for s in self.sockets:
            s.close()


def test_greeting_and_pipelined_answer_beyond_a_small_ring(workdir, cluster):
    """An SHM client with 4 KiB rings sends a query behind its StartupMessage; Postgres's
    greeting and the 6,000-byte answer reach l5pgd in one read (a relay holds them): the
    greeting goes to the client and the answer follows as the client makes room. Before,
    what did not fit into the ring at once closed the session."""
    from tests.harness.l5wire import ShmClient
    relay_dir = Path(tempfile.mkdtemp(prefix="relay-", dir=workdir))
    relay = CoalescingRelay(relay_dir, cluster)
    base = Path(tempfile.mkdtemp(prefix="pool-", dir=workdir))
    d = L5pgd(base, cluster, workers=1, extra_overrides=["pool.mode=session"],
              upstream_socket_dir=str(relay_dir))
    d.start()
    c = ShmClient(d.socket_path, c2s=4096, s2c=4096)
    try:
        assert c.upgrade() == b"L"
        body = b"select repeat('x', 6000)\0"
        c.write_bytes(pgwire.startup_packet(application_name=new_app()) +
                      b"Q" + struct.pack("!I", len(body) + 4) + body)
        greeting = c.read_until_ready(timeout=WAIT)
        assert [t for t, _ in greeting if t in "EKZ"] == ["K", "Z"], greeting
        answer = c.read_until_ready(timeout=WAIT)
        rows = [b for t, b in answer if t == "D"]
        assert len(rows) == 1 and rows[0].endswith(b"x" * 6000), [t for t, _ in answer]
        assert "cannot write to the client ring" not in d.log_text()
    finally:
        c.close(clean=False)
        d.stop()
        relay.close()
