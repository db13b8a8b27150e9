"""How a departing client's session ends (daemon/session_depart.cpp): bounded by
limits.drain_timeout_ms, and awaited by a SIGINT shutdown, which refuses new sessions with
57P03 and still forwards cancel requests (daemon/server.cpp begin_graceful_shutdown)."""
import signal
import time
import uuid

import pytest

from tests.harness import paths, pgwire
from tests.harness.client import (PYTHON, popen, psql_cmd, run, run_python, shm_target,
                                  unix_target)
from tests.harness.cancel import LONG_QUERY_CANCELLED_ON_REQUEST
from tests.harness.l5pgd import L5pgd

HELPER = paths.BUILD_DIR / "bin" / "l5pg-send-then-close"
BIG_ROWS = 20000  # tests/tools/send_then_close.cpp kBigRows

# Publishes `sql` without waiting for its result, then closes (Terminate follows it).
SEND_AND_CLOSE = r"""
import sys
import psycopg
c = psycopg.connect(autocommit=True)
c.execute("select 1")
c.pgconn.send_query(sys.argv[1].encode())
while c.pgconn.flush() == 1:
    pass
c.close()
print("sent")
"""


def wait_for(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not within {timeout} s")
        time.sleep(0.02)


@pytest.mark.timeout(60)
def test_drain_timeout_bounds_a_departed_session(workdir, cluster, l5pgd_binary, shim):
    """The client leaves while Postgres runs its last statement: once everything is handed
    over, l5pgd waits for Postgres to close at most limits.drain_timeout_ms, and that is no
    session error (nothing was lost)."""
    d = L5pgd(workdir / f"l5pgd-drain-{uuid.uuid4().hex[:6]}", cluster,
              extra_overrides=["limits.drain_timeout_ms=300"])
    d.start()
    try:
        errors = d.metric("l5pg_session_errors_total", transport="shm")
        start = time.monotonic()
        run_python(shm_target(d), SEND_AND_CLOSE, args=["select pg_sleep(4)"])
        wait_for(lambda: d.metric("l5pg_sessions_active", transport="shm") == 0, 3,
                 "the departed session closed (drain timeout 300 ms, statement 4 s)")
        assert time.monotonic() - start < 3.5
        assert "Postgres still busy at drain timeout" in d.log_text(), d.log_tail()
        assert d.metric("l5pg_session_errors_total", transport="shm") == errors
    finally:
        d.stop()


@pytest.mark.timeout(60)
def test_drain_timeout_names_a_half_closed_client_that_does_not_read(workdir, cluster,
                                                                     l5pgd_binary):
    """A socket client shuts down its sending side after a query with a large answer and
    never reads: Postgres is held up by the client, not busy, and the log says so at the
    drain timeout."""
    d = L5pgd(workdir / f"l5pgd-drain-{uuid.uuid4().hex[:6]}", cluster,
              extra_overrides=["limits.drain_timeout_ms=300"])
    d.start()
    try:
        s = pgwire.unix_login(d.socket_path)
        sql = b"select repeat('x', 1000) from generate_series(1, 50000)\0"
        s.sendall(b"Q" + len(sql).__add__(4).to_bytes(4, "big") + sql)
        s.shutdown(__import__("socket").SHUT_WR)
        wait_for(lambda: d.metric("l5pg_sessions_active", transport="unix") == 0, 5,
                 "the departed session closed (drain timeout 300 ms)")
        assert "the client, gone half-way, did not read Postgres's answers" in d.log_text(), \
            d.log_tail()
        s.close()
    finally:
        d.stop()


@pytest.mark.timeout(60)
def test_sigint_waits_for_departing_sessions(workdir, cluster, l5pgd_binary, shim):
    """SIGINT waits for every session to end, departing ones included:
    megabytes a client published just before it left still reach Postgres."""
    assert HELPER.exists(), f"{HELPER} missing: build the tests/tools targets"
    table = f"cp_{uuid.uuid4().hex[:8]}"
    cluster.sql(f"create table {table} (i int, pad text)")
    d = L5pgd(workdir / f"l5pgd-sigint-{uuid.uuid4().hex[:6]}", cluster)
    d.start()
    try:
        run([HELPER, "bigcopy", table, "1"], shm_target(d))
        d.proc.send_signal(signal.SIGINT)
        assert d.proc.wait(timeout=20) == 0, d.log_tail()
        assert cluster.sql(f"select count(*) from {table}") == str(BIG_ROWS), d.log_tail()
    finally:
        d.stop()


@pytest.mark.timeout(90)
def test_sigint_refuses_new_sessions_and_forwards_cancels(workdir, cluster, l5pgd_binary, shim):
    """During SIGINT's drain a new client gets FATAL 57P03 (as from a Postgres in smart
    shutdown), over the Unix socket and SHM; a running statement can still be cancelled, and
    l5pgd exits once its session ends, whatever admin console sessions are open (a
    monitoring agent's idle one kept the drain waiting for ever, and the console refused
    the operator who wanted to see why)."""
    app = f"l5pg-drain-{uuid.uuid4().hex[:8]}"
    d = L5pgd(workdir / f"l5pgd-sigint-refuse-{uuid.uuid4().hex[:6]}", cluster)
    d.start()
    p = popen([PYTHON, "-c", LONG_QUERY_CANCELLED_ON_REQUEST, app], shm_target(d),
              stdin=__import__("subprocess").PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "started", p.stderr.read()
        wait_for(lambda: cluster.sql("select count(*) from pg_stat_activity where "
                                     f"application_name = '{app}' and state = 'active'") == "1",
                 10, "the statement running")
        d.proc.send_signal(signal.SIGINT)
        wait_for(lambda: "SIGINT: new sessions refused" in d.log_text(), 10, "the drain")
        for target in (unix_target(d), shm_target(d)):
            r = run(psql_cmd("-c", "select 1"), target, check=False, timeout=30)
            assert r.returncode != 0, r.stdout
            assert "FATAL:  l5pgd is shutting down" in r.stderr, r.stderr
        assert d.metric("l5pg_connections_refused_total", reason="shutting_down") == 2
        # The console still takes logins and shows what the drain waits for; its sessions,
        # an idle one too, do not hold the drain up and get the 57P01 at the end.
        console = pgwire.unix_login(d.socket_path, database="l5pgd")
        shown = run(psql_cmd("-d", "l5pgd", "-c", "SHOW SESSIONS"), unix_target(d)).stdout
        assert any("|shm|" in row and "|active|" in row for row in shown.splitlines()), shown
        assert d.proc.poll() is None, "l5pgd left before its session ended"
        p.stdin.write("cancel\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "57014", p.stderr.read()  # query_canceled
        assert p.wait(timeout=20) == 0
        assert d.proc.wait(timeout=20) == 0, d.log_tail()
        typ, body = pgwire.read_message(console)
        assert typ == "E" and pgwire.parse_fields(body)["C"] == "57P01", (typ, body)
        console.close()
    finally:
        p.kill()
        p.wait()
        d.stop()
