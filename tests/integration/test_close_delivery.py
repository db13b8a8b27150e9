"""Issue 20: a client's last messages must reach Postgres when it leaves.

A client that publishes a statement without waiting for its result and then closes the
connection, exits or dies still gets that statement run, as with a direct connection: l5pgd
forwards everything the client published (SHM ring, RDMA ring, socket bytes already read)
before it closes the upstream, even when the client's socket reports ECONNRESET/EPIPE.

Every case runs COUNT connections inside one client process (forked children for the
exit cases) and then demands exactly rows 0..COUNT-1. Clean departures must not count as
session errors nor make Postgres log "unexpected EOF".
"""
import socket
import struct
import time
import uuid

import pytest

from tests.harness import paths, pgwire
from tests.harness.client import run
from tests.harness.rdma import EVERY_TRANSPORT

COUNT = 200
HELPER = paths.BUILD_DIR / "bin" / "l5pg-send-then-close"

# psycopg 3: COUNT connections, each publishes row i and leaves as `mode` says.
#   close: the loop from the issue (send_query, flush, close);
#   exit:  a forked child returns through the interpreter's normal exit, connection open;
#   _exit: a forked child dies with os._exit right after the flush;
#   copy:  COPY FROM STDIN, one row, CopyDone, close.
PSYCOPG_SCRIPT = r"""
import os, select, selectors, sys
if os.environ.get("L5PG_TEST_NO_EPOLL"):
    # The RDMA channel keeps epoll users on TCP (test_rdma.py): wait with poll instead.
    selectors.DefaultSelector = selectors.PollSelector
import psycopg

mode, table, count = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])

def flush(pg):
    while pg.flush() == 1:
        select.select([], [pg.socket], [], 1.0)

def publish(i):
    c = psycopg.connect(autocommit=True)
    c.execute("select 1")
    pg = c.pgconn
    if mode == "copy":
        pg.send_query(b"copy %s from stdin" % table)
        flush(pg)
        r = pg.get_result()
        assert r.status == psycopg.pq.ExecStatus.COPY_IN, r.status
        assert pg.put_copy_data(b"%d\n" % i) == 1
        assert pg.put_copy_end() == 1
    else:
        pg.send_query(b"insert into %s values (%d)" % (table, i))
    flush(pg)
    return c

for i in range(count):
    if mode in ("close", "copy"):
        publish(i).close()
        continue
    pid = os.fork()
    if pid == 0:
        conn = publish(i)
        if mode == "_exit":
            os._exit(0)
        sys.exit(0)  # unwinds this loop too: the child ends with the interpreter's exit
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
print("ok", count)
"""


@pytest.fixture(scope="module")
def daemon(every_transport_daemon):
    return every_transport_daemon


@pytest.fixture(params=list(EVERY_TRANSPORT))
def via(request, daemon):
    return EVERY_TRANSPORT[request.param](daemon)


def client_backends(cluster):
    return int(cluster.sql("select count(*) from pg_stat_activity "
                           "where backend_type = 'client backend' and pid <> pg_backend_pid()"))


def wait_quiet(daemon, cluster, transport, timeout=30):
    """Waits until l5pgd has closed every session of `transport` and Postgres has no other
    client backend left: then everything published has been run (or lost for good)."""
    deadline = time.monotonic() + timeout
    while True:
        active = daemon.metric("l5pg_sessions_active", transport=transport)
        backends = client_backends(cluster)
        if active == 0 and backends == 0:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"not quiet after {timeout}s: {active} {transport} sessions open, "
                        f"{backends} client backends\n{daemon.log_tail()}")
        time.sleep(0.05)


def pg_log_size(cluster):
    return cluster.log_path.stat().st_size


def pg_log_since(cluster, offset):
    with open(cluster.log_path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def assert_rows(cluster, table, n, transport, log):
    """Exactly the values 0..n-1 in table.i, each once."""
    got = cluster.sql(f"select count(*), count(distinct i), min(i), max(i) from {table}")
    if got != f"{n}|{n}|0|{n - 1}":
        missing = cluster.sql(f"select count(*) from generate_series(0, {n - 1}) g "
                              f"where g not in (select i from {table})")
        sample = cluster.sql(f"select string_agg(g::text, ',') from (select g from "
                             f"generate_series(0, {n - 1}) g where g not in "
                             f"(select i from {table}) order by g limit 20) s")
        pytest.fail(f"{n - int(missing)}/{n} rows landed over {transport} "
                    f"(count|distinct|min|max = {got}); missing {sample}\n{log}")


def check_delivery(daemon, cluster, target, client_cmd, table, rows=COUNT, columns="i int",
                   connections=COUNT):
    """Runs the client (`connections` sessions), then demands rows 0..rows-1, no new session
    errors and no 'unexpected EOF' in the Postgres log."""
    cluster.sql(f"create table {table} ({columns})")
    errors = daemon.metric("l5pg_session_errors_total", transport=target.name)
    offset = pg_log_size(cluster)
    sessions = daemon.metric("l5pg_sessions_total", transport=target.name)
    run(client_cmd, target, timeout=120, env={"L5PG_TEST_NO_EPOLL": "1"} if target.name == "rdma" else None)
    wait_quiet(daemon, cluster, target.name)
    assert daemon.alive(), daemon.log_tail()
    assert daemon.metric("l5pg_sessions_total", transport=target.name) >= sessions + connections, \
        f"the connections did not go over {target.name}"
    assert_rows(cluster, table, rows, target.name, daemon.log_tail(20))
    assert daemon.metric("l5pg_session_errors_total", transport=target.name) == errors, \
        daemon.log_tail(20)
    log = pg_log_since(cluster, offset)
    assert "unexpected EOF" not in log, log[-3000:]


def table_name(case):
    return f"cd_{case}_{uuid.uuid4().hex[:8]}"


@pytest.mark.timeout(150)
@pytest.mark.parametrize("mode", ["close", "exit", "_exit", "copy"])
def test_psycopg_publish_then_leave(daemon, cluster, via, mode):
    table = table_name("py" + mode.strip("_"))
    cmd = ["/usr/bin/python3", "-c", PSYCOPG_SCRIPT, mode, table, str(COUNT)]
    check_delivery(daemon, cluster, via, cmd, table)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("mode", ["finish", "exit", "_exit", "copy"])
def test_libpq_publish_then_leave(daemon, cluster, via, mode):
    assert HELPER.exists(), f"{HELPER} missing: build the tests/tools targets"
    table = table_name("c" + mode.strip("_"))
    check_delivery(daemon, cluster, via, [HELPER, mode, table, str(COUNT)], table)


BIG_CONNECTIONS = 4
BIG_ROWS = 20000  # per connection, ~4 MB: tests/tools/send_then_close.cpp kBigRows


@pytest.mark.timeout(150)
def test_libpq_big_copy_then_close(daemon, cluster, via):
    """Leaves with megabytes still on their way: the upstream socket fills up (EAGAIN) and
    the departing session must wait for Postgres to take the rest."""
    assert HELPER.exists(), f"{HELPER} missing: build the tests/tools targets"
    table = table_name("bigcopy")
    check_delivery(daemon, cluster, via, [HELPER, "bigcopy", table, str(BIG_CONNECTIONS)], table,
                   rows=BIG_CONNECTIONS * BIG_ROWS, columns="i int, pad text",
                   connections=BIG_CONNECTIONS)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["direct", "l5pgd"])
def test_half_closed_socket_client_still_gets_its_answer(daemon, cluster, where):
    """The other direction: a socket client that sends a query and then shuts down only
    its sending side (shutdown(SHUT_WR)) reads the answer from Postgres directly; through
    l5pgd it must get it too, then EOF."""
    path = (cluster.socket_dir / f".s.PGSQL.{cluster.port}" if where == "direct"
            else daemon.socket_path)
    errors = daemon.metric("l5pg_session_errors_total", transport="unix")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(path))
        s.sendall(pgwire.startup_packet())
        assert pgwire.read_until_ready(s)[-1][0] == "Z"
        body = b"select 6 * 7\0"
        s.sendall(b"Q" + struct.pack("!I", 4 + len(body)) + body)
        s.shutdown(socket.SHUT_WR)
        msgs = pgwire.read_until_ready(s)
        rows = [b for t, b in msgs if t == "D"]
        assert len(rows) == 1 and rows[0].endswith(b"42"), msgs
        assert msgs[-1][0] == "Z", msgs
        assert pgwire.at_eof(s, 10), "no EOF after the answer"
    assert daemon.metric("l5pg_session_errors_total", transport="unix") == errors

