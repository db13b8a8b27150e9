"""Faults under load, against a real Postgres: a backend killed mid-transaction, Postgres
restarted immediately under pgbench over SHM, l5pgd killed and restarted, a client stopped
for longer than every timeout, an RDMA (soft) peer killed mid-stream.

For each: every client gets an answer or an error within a bounded time (none hangs), new
sessions work afterwards, and a ledger shows that no acknowledged commit was lost: writers
insert one row per commit in autocommit mode and print each acknowledgement; afterwards every
acknowledged row is in the table exactly once, and at most one unacknowledged row per writer
(the commit in flight when the fault hit) is there besides.
"""
import signal
import subprocess
import time
import uuid

import pytest

from tests.harness import paths
from tests.harness.cancel import stop_process
from tests.harness.client import (PYTHON, LineReader, make_target, pgbench, popen, psql,
                                  psql_cmd, shm_target)
from tests.harness.cluster import PgCluster, _as_postgres
from tests.harness.l5pgd import L5pgd
from tests.harness.rdma import rdma_overrides, rdma_target

FAULT_DEADLINE = 20  # seconds within which every client must have its answer or error

# One writer: insert a ledger row per autocommit transaction, print "ack N" for each, and on
# the first error print it and exit 3. argv: writer id, seconds to run at most.
LEDGER_WRITER = r"""
import sys, time, psycopg2
writer, deadline = sys.argv[1], time.monotonic() + float(sys.argv[2])
n = 0
try:
    conn = psycopg2.connect("")
    conn.autocommit = True
    cur = conn.cursor()
    print("ready", flush=True)
    while time.monotonic() < deadline:
        n += 1
        cur.execute("insert into ledger (writer, seq) values (%s, %s)", (writer, n))
        print(f"ack {n}", flush=True)
        time.sleep(0.002)
except Exception as e:
    print(f"error {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}",
          flush=True)
    sys.exit(3)
"""


@pytest.fixture(scope="module")
def fault_cluster(workdir):
    """Commits are acknowledged only once their WAL is written (synchronous_commit=on), so a
    Postgres crash loses none of them: what the ledger then misses, a proxy lost."""
    c = PgCluster(workdir / "pg-faults")
    c.init()
    c.add_settings("synchronous_commit = on\nrestart_after_crash = on\n")
    try:
        c.start()
        c.sql("create table ledger (writer text, seq int, primary key (writer, seq))")
        r = subprocess.run([paths.PGBENCH, "-i", "-s", "1", "-q"], env=c.env(), capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def proxy(workdir, fault_cluster):
    d = L5pgd(workdir / "l5pgd-faults", fault_cluster, workers=2,
              extra_overrides=rdma_overrides("soft") + ["rdma.completion_timeout_ms=2000"])
    d.start()
    yield d
    d.stop()


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.05)


def backend_pid(cluster, app, timeout=15):
    found = []
    wait_until(lambda: found.append(cluster.sql(
        f"select pid from pg_stat_activity where application_name = '{app}'")) or found[-1],
        timeout, f"a backend for {app}")
    return int(found[-1].splitlines()[0])


def postgres_up(cluster):
    try:
        return cluster.sql("select 1", timeout=5) == "1"
    except Exception:  # noqa: BLE001 - down or in recovery
        return False


class Writer:
    """A ledger writer process through one target; its acknowledgements are read on a
    thread as they come (LineReader), so none is lost whatever the test waits for."""

    def __init__(self, target, name, seconds=60):
        self.name = f"{name}-{uuid.uuid4().hex[:6]}"
        self.proc = popen([PYTHON, "-c", LEDGER_WRITER, self.name, str(seconds)], target,
                          env={"PGAPPNAME": self.name}, stderr=subprocess.DEVNULL, text=True)
        self.reader = LineReader(self.proc.stdout)
        assert self.reader.wait_for(lambda ln: ln == "ready" or ln.startswith("error"), 30) \
            == "ready", self.describe()

    def wait_acks(self, n, timeout=30):
        line = self.reader.wait_for(lambda ln: ln == f"ack {n}" or ln.startswith("error"),
                                    timeout)
        assert line == f"ack {n}", self.describe()

    def finish(self, timeout=FAULT_DEADLINE):
        """Waits for the writer to exit (bounded: no hang) and reads what it printed."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_process(self.proc)
            raise AssertionError(f"writer {self.name} hung for {timeout}s after the fault")
        while self.reader.wait_for(lambda ln: False, 5) is not None:
            pass  # up to EOF
        return self.proc.returncode

    @property
    def lines(self):
        return self.reader.lines

    def acked(self):
        return [int(ln.split()[1]) for ln in self.lines if ln.startswith("ack ")]

    def error(self):
        return next((ln for ln in self.lines if ln.startswith("error ")), None)

    def describe(self):
        return f"writer {self.name}: {self.lines[-3:]} rc={self.proc.poll()}"


def assert_ledger(cluster, writers):
    for w in writers:
        rows = cluster.sql(f"select seq from ledger where writer = '{w.name}' order by seq")
        stored = [int(x) for x in rows.split()] if rows else []
        acked = w.acked()
        lost = sorted(set(acked) - set(stored))
        assert not lost, f"{w.name}: acknowledged commits lost: {lost[:10]}"
        extra = sorted(set(stored) - set(acked))
        assert len(extra) <= 1 and all(x == len(acked) + 1 for x in extra), \
            f"{w.name}: rows that were never acknowledged: {extra[:10]} (acked {len(acked)})"


def writers_on(proxy, names=("shm", "unix", "tcp")):
    return [Writer(make_target(n, proxy), n) for n in names]


def assert_new_sessions_work(proxy, names=("shm", "unix", "tcp", "rdma")):
    for n in names:
        target = rdma_target(proxy) if n == "rdma" else make_target(n, proxy)
        wait_until(lambda: psql(target, "select 7", check=False).returncode == 0, 30,
                   f"a new session over {n}")


@pytest.mark.timeout(180)
def test_backend_killed_mid_transaction(fault_cluster, proxy):
    writers = writers_on(proxy)
    for w in writers:
        w.wait_acks(20)
    # One client in an open transaction over SHM; its backend is the one killed.
    app = f"open-tx-{uuid.uuid4().hex[:6]}"
    script = ("import sys, psycopg2\n"
              "c = psycopg2.connect('')\ncur = c.cursor()\n"
              "cur.execute(\"insert into ledger values ('open-tx', 1)\")\n"
              "print('in tx', flush=True)\nsys.stdin.readline()\n"
              "try:\n    cur.execute('commit')\n    print('committed', flush=True)\n"
              "except Exception as e:\n    print('error', type(e).__name__, flush=True)\n")
    victim = popen([PYTHON, "-c", script], shm_target(proxy), env={"PGAPPNAME": app},
                   stdin=subprocess.PIPE, text=True)
    try:
        assert victim.stdout.readline().strip() == "in tx"
        pid = backend_pid(fault_cluster, app)
        subprocess.run(_as_postgres(["kill", "-9", str(pid)]), check=True)
        # The postmaster ends every backend and recovers: each writer must hear of it.
        for w in writers:
            w.finish()
            assert w.error(), f"{w.describe()} got no error"
        out, _ = victim.communicate("go\n", timeout=FAULT_DEADLINE)
        assert "error" in out and "committed" not in out, out
    finally:
        stop_process(victim)
    wait_until(lambda: postgres_up(fault_cluster), 60, "Postgres's recovery")
    assert fault_cluster.sql("select count(*) from ledger where writer = 'open-tx'") == "0"
    assert_ledger(fault_cluster, writers)
    assert_new_sessions_work(proxy)
    assert proxy.alive()


@pytest.mark.timeout(240)
def test_immediate_restart_under_pgbench_over_shm(fault_cluster, proxy):
    bench = popen([paths.PGBENCH, "-c", "8", "-j", "2", "-T", "60", "-n", "-M", "prepared"],
                  shm_target(proxy), text=True)
    writers = writers_on(proxy, ("shm", "shm"))
    try:
        for w in writers:
            w.wait_acks(20)
        r = subprocess.run(_as_postgres([paths.PG_BIN / "pg_ctl", "-D", fault_cluster.data_dir,
                                         "-m", "immediate", "-w", "-t", "60", "-l",
                                         fault_cluster.log_path, "restart"]),
                           capture_output=True, text=True, timeout=90)
        assert r.returncode == 0, r.stderr
        for w in writers:
            w.finish()
            assert w.error(), w.describe()
        try:
            _, err = bench.communicate(timeout=FAULT_DEADLINE)
        except subprocess.TimeoutExpired:
            raise AssertionError("pgbench hung after Postgres's immediate restart")
        assert bench.returncode != 0, "pgbench did not notice the restart"
    finally:
        stop_process(bench)
    wait_until(lambda: postgres_up(fault_cluster), 60, "Postgres after the restart")
    assert_ledger(fault_cluster, writers)
    r = pgbench(shm_target(proxy), ["-c", "8", "-j", "2", "-t", "20", "-n", "-M", "prepared"])
    assert r.failed == 0 and r.processed == 160
    assert proxy.alive()


@pytest.mark.timeout(180)
def test_l5pgd_killed_and_restarted(workdir, fault_cluster):
    d = L5pgd(workdir / "l5pgd-killed", fault_cluster, workers=2)
    d.start()
    try:
        writers = writers_on(d)
        for w in writers:
            w.wait_acks(20)
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(timeout=10)
        for w in writers:
            w.finish()
            assert w.error(), w.describe()
        # Postgres sees the upstream sockets close: the sessions' backends go away.
        wait_until(lambda: fault_cluster.sql(
            "select count(*) from pg_stat_activity where application_name like 'shm-%' "
            "or application_name like 'unix-%' or application_name like 'tcp-%'") == "0",
            FAULT_DEADLINE, "the killed l5pgd's backends to end")
        assert_ledger(fault_cluster, writers)
        d.start()  # the same socket path: the stale socket file is replaced
        assert_new_sessions_work(d, ("shm", "unix", "tcp"))
    finally:
        d.stop()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["shm", "rdma"])
def test_client_stopped_longer_than_every_timeout(fault_cluster, proxy, kind):
    """SIGSTOP for longer than rdma.completion_timeout_ms and the startup timeout, then
    SIGCONT: the stopped client resumes (SHM has nothing to time out) or gets an error
    (RDMA gives up on a peer that acknowledges nothing), and nobody else waits for it."""
    target = rdma_target(proxy) if kind == "rdma" else make_target(kind, proxy)
    w = Writer(target, f"stopped-{kind}")
    try:
        w.wait_acks(10)
        w.proc.send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        while time.monotonic() - stopped_at < 4:  # > rdma.completion_timeout_ms (2 s)
            assert psql(make_target("shm", proxy), "select 1") == "1"
        w.proc.send_signal(signal.SIGCONT)
        resumed = len(w.acked()) + 10
        line = w.reader.wait_for(lambda ln: ln == f"ack {resumed}" or ln.startswith("error"),
                                 FAULT_DEADLINE)
        assert line is not None, f"stopped client neither resumed nor failed: {w.describe()}"
        if kind == "shm":
            assert line.startswith("ack"), f"SHM client failed after SIGCONT: {w.describe()}"
        w.proc.terminate()
        w.finish()
    finally:
        stop_process(w.proc)
    assert_ledger(fault_cluster, [w])
    assert_new_sessions_work(proxy, (kind,))


@pytest.mark.timeout(120)
def test_rdma_peer_killed_mid_stream(fault_cluster, proxy):
    """A soft-RDMA client killed while it streams COPY data: l5pgd ends that session and
    Postgres rolls the COPY back; another RDMA writer carries on untouched."""
    other = Writer(rdma_target(proxy), "rdma-bystander")
    app = f"rdma-copy-{uuid.uuid4().hex[:6]}"
    # A client streaming rows with COPY FROM STDIN, killed mid-stream.
    feeder = subprocess.Popen(["bash", "-c", "i=0; while true; do i=$((i+1)); "
                               "echo \"killed-copy\t$i\"; done"], stdout=subprocess.PIPE)
    victim = popen(psql_cmd("-c", "copy ledger (writer, seq) from stdin"), rdma_target(proxy),
                   env={"PGAPPNAME": app}, stdin=feeder.stdout)
    try:
        other.wait_acks(10)
        backend_pid(fault_cluster, app)
        time.sleep(0.5)  # let COPY data flow: the kill must land mid-stream
        victim.kill()
        victim.wait(timeout=10)
        wait_until(lambda: fault_cluster.sql(
            f"select count(*) from pg_stat_activity where application_name = '{app}'") == "0",
            FAULT_DEADLINE, "the killed RDMA client's backend to end")
        n = len(other.acked())
        other.wait_acks(n + 10)
    finally:
        stop_process(victim)
        feeder.kill()
        other.proc.terminate()
        other.finish()
    assert fault_cluster.sql("select count(*) from ledger where writer = 'killed-copy'") == "0"
    assert_ledger(fault_cluster, [other])
    assert proxy.alive()
