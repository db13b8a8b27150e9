"""Issue 21: no local client can make l5pgd grow without bound or stall other clients.

Each test starts its own l5pgd (workers.count=1, so that the misbehaving client and the
bystander share a worker) in front of the session's Postgres cluster.
"""
import os
import pwd
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg2
import pytest

from tests.harness import pgwire
from tests.harness.cancel import stop_process
from tests.harness.client import Target, popen, psql, psql_cmd, run, shm_target, unix_target
from tests.harness.l5pgd import L5pgd
from tests.harness.ports import free_port
from tests.harness.procstat import vm_rss
from tests.harness.l5wire import ShmClient
from tests.harness.rdma import rdma_overrides, rdma_target
from tests.harness.waiting import wait_for

MiB = 1024 * 1024
BUFFER = 256 * 1024  # limits.session_buffer_bytes, the default
# config/l5pgd.example.yaml: a session costs at most 4 x session_buffer_bytes + 384 KiB.
SESSION_BOUND = 4 * BUFFER + 384 * 1024


@pytest.fixture
def start_l5pgd(workdir, cluster, l5pgd_binary, request):
    """Starts a fresh l5pgd with one worker and the given -o overrides; stopped afterwards."""
    started = []

    def start(*overrides):
        # Short directory names: a Unix socket path has at most 107 bytes.
        d = L5pgd(Path(tempfile.mkdtemp(prefix="l5b-", dir=workdir)), cluster, workers=1,
                  extra_overrides=overrides)
        started.append(d)
        return d.start()

    yield start
    for d in started:
        d.stop()


def raw_startup(d, transport):
    """A plain (no shim) PG protocol connection to l5pgd over its Unix socket or TCP."""
    if transport == "unix":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(str(d.socket_path))
    else:
        s = socket.create_connection((d.host, d.port), timeout=10)
    s.sendall(pgwire.startup_packet(application_name="l5pg-bounds"))
    msgs = pgwire.read_until_ready(s)
    assert msgs[-1][0] == "Z", msgs
    return s


class MessageCounter:
    """Counts backend messages in a byte stream without keeping it (DataRow 'D' etc.)."""

    def __init__(self):
        self.buf = b""
        self.rows = 0
        self.done = False
        self.error = None

    def feed(self, data):
        buf = self.buf + data
        pos = 0
        while len(buf) - pos >= 5:
            typ = buf[pos]
            (length,) = struct.unpack_from("!I", buf, pos + 1)
            if len(buf) - pos < 1 + length:
                break
            if typ == ord("D"):
                self.rows += 1
            elif typ == ord("E"):
                self.error = pgwire.parse_fields(buf[pos + 5:pos + 1 + length])
            elif typ == ord("Z"):
                self.done = True
            pos += 1 + length
        self.buf = buf[pos:]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_slow_reader_of_a_large_result_keeps_l5pgd_memory_bounded(start_l5pgd, transport):
    """A Unix-socket or TCP client reads a ~1 GB result at ~30 MB/s (64 KiB every 2 ms) for a
    while, then at full speed: l5pgd's RSS stays below the documented per-session bound
    plus 20 MB all along (before the fix it grew by the bytes that had passed through)."""
    d = start_l5pgd()  # limits.session_buffer_bytes at its default, BUFFER
    rows = 1_000_000
    pid = d.proc.pid
    s = raw_startup(d, transport)
    base_rss = vm_rss(pid)
    q = f"select repeat('x', 1000) from generate_series(1, {rows})".encode() + b"\0"
    s.sendall(b"Q" + struct.pack("!I", len(q) + 4) + q)
    counter = MessageCounter()
    max_rss = base_rss
    slow_until = time.monotonic() + 8.0  # ~250 MB at the slow rate
    next_sample = 0.0
    while not counter.done:
        data = s.recv(64 * 1024)
        assert data, "l5pgd closed the connection mid-result"
        counter.feed(data)
        now = time.monotonic()
        if now >= next_sample:
            max_rss = max(max_rss, vm_rss(pid))
            next_sample = now + 0.05
        if now < slow_until:
            time.sleep(0.002)
    assert counter.error is None, counter.error
    assert counter.rows == rows
    pgwire.terminate(s)
    s.close()
    print(f"l5pgd VmRSS: {base_rss / MiB:.1f} MiB at start, at most {max_rss / MiB:.1f} MiB "
          f"while reading (bound {SESSION_BOUND / MiB:.1f} MiB + 20 MiB)")
    assert max_rss <= base_rss + SESSION_BOUND + 20 * MiB, (
        f"l5pgd's RSS grew from {base_rss / MiB:.1f} to {max_rss / MiB:.1f} MiB")


SLOW_PIPE = r"""
import sys, time
total = 0
slow_until = time.monotonic() + float(sys.argv[1])
while True:
    data = sys.stdin.buffer.read1(64 * 1024)
    if not data:
        break
    total += len(data)
    if time.monotonic() < slow_until:
        time.sleep(0.002)
print(total)
"""


@pytest.mark.timeout(120)
def test_slow_rdma_reader_keeps_l5pgd_memory_bounded(start_l5pgd, shim):
    """The same over RDMA (soft device): psql streams a ~1 GB COPY into a pipe read at
    ~30 MB/s for 8 s, then fast; l5pgd's RSS stays below the bound plus 20 MB."""
    d = start_l5pgd(*rdma_overrides())
    rows = 1_000_000
    pid = d.proc.pid
    base_rss = vm_rss(pid)
    reader = subprocess.Popen([sys.executable, "-c", SLOW_PIPE, "8"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
    sql = f"copy (select repeat('x', 1000) from generate_series(1, {rows})) to stdout"
    writer = popen(psql_cmd("-c", sql), rdma_target(d), stdout=reader.stdin)
    reader.stdin.close()
    max_rss = base_rss
    try:
        while writer.poll() is None:
            max_rss = max(max_rss, vm_rss(pid))
            time.sleep(0.05)
        total = int(reader.stdout.read())
        reader.wait(timeout=60)
    finally:
        stop_process(writer)
        stop_process(reader)
    assert writer.returncode == 0, writer.stderr.read()
    assert total == rows * 1001
    assert d.metric("l5pg_sessions_total", transport="rdma") == 1, d.log_tail()
    print(f"l5pgd VmRSS: {base_rss / MiB:.1f} MiB at start, at most {max_rss / MiB:.1f} MiB "
          f"while reading (bound {SESSION_BOUND / MiB:.1f} MiB + 20 MiB)")
    assert max_rss <= base_rss + SESSION_BOUND + 20 * MiB, (
        f"l5pgd's RSS grew from {base_rss / MiB:.1f} to {max_rss / MiB:.1f} MiB")


FLOODER = r"""
import os, sys
fd = int(sys.argv[1])
chunk = b"\x01"  # one byte per write: as many wake-ups as it can cause
os.set_blocking(fd, True)
try:
    os.write(fd, chunk)
    print("flooding", flush=True)
    while True:
        os.write(fd, chunk)
except OSError:
    pass
"""


def median_psql_ms(target, n):
    """Median wall time of `psql -c 'select 1'` through l5pgd, as a user would see it."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        psql(target, "select 1")
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


@pytest.mark.serial  # compares latencies before and during: another test's load would differ
def test_doorbell_flood_neither_stalls_other_clients_nor_goes_unnoticed(start_l5pgd, shim):
    """An SHM client writing doorbell bytes in a loop (no ring activity) on the worker that
    other clients use: their median psql latency stays below twice its baseline (before
    the fix the flood cost l5pgd most of a core), and l5pgd closes the flooder with a
    logged reason."""
    d = start_l5pgd()
    others = shm_target(d)
    flooder = ShmClient(d.socket_path, c2s=4096, s2c=4096)
    try:
        assert flooder.upgrade() == b"L"
        assert flooder.startup(application_name="l5pg-flooder")[-1][0] == "Z"
        before = median_psql_ms(others, 15)
        proc = subprocess.Popen([sys.executable, "-c", FLOODER, str(flooder.sock.fileno())],
                                pass_fds=[flooder.sock.fileno()], stdout=subprocess.PIPE)
        try:
            assert proc.stdout.readline() == b"flooding\n"
            during = median_psql_ms(others, 15)
            print(f"psql median latency: {before:.1f} ms before, {during:.1f} ms during the "
                  "flood")
            wait_for(lambda: "doorbell flood" in d.log_text(), 10, "the flood to be logged")
            assert proc.wait(timeout=10) == 0  # its writes failed: l5pgd closed the socket
        finally:
            proc.kill()
            proc.wait()
    finally:
        flooder.close(clean=False)
    assert during < 2 * before, f"median psql latency {before:.1f} ms -> {during:.1f} ms"
    assert d.alive()


def test_poke_flag_without_doorbell_is_not_answered(start_l5pgd):
    """A poke is the s2c reader_waiting flag and a doorbell byte. An SHM client that leaves
    data unread and only sets the flag, over and over, without ringing, gets no doorbell
    back, however busy its worker is with another session: before, the worker answered
    every store it saw while polling, a send() for a memory write. Rung, the flag is
    answered once per doorbell (the last step)."""
    from tests.harness import l5wire
    d = start_l5pgd()
    busy = ShmClient(d.socket_path)
    c = ShmClient(d.socket_path, c2s=4096, s2c=4096)
    stop = threading.Event()
    queries = 0

    def keep_worker_polling():
        nonlocal queries
        while not stop.is_set():
            busy.query("select 1")
            queries += 1

    try:
        assert busy.upgrade() == b"L" and c.upgrade() == b"L"
        assert busy.startup(application_name="l5pg-busy")[-1][0] == "Z"
        assert c.startup(application_name="l5pg-poker")[-1][0] == "Z"
        body = b"select 1\0"
        c.write_bytes(b"Q" + struct.pack("!I", len(body) + 4) + body)
        wait_for(lambda: c.s2c_next_length() != 0, 5, "the answer in the ring, unread")
        c.drain_socket()
        before = c.doorbells_received
        flag = l5wire.OFF_S2C + l5wire.RC_READER_WAITING
        poller = threading.Thread(target=keep_worker_polling)
        poller.start()
        try:
            deadline = time.monotonic() + 2
            stores = 0
            while time.monotonic() < deadline:
                c.poke32(flag, 1)
                stores += 1
                c.drain_socket()
        finally:
            stop.set()
            poller.join()
        answered = c.doorbells_received - before
        print(f"{stores} flag stores while {queries} queries kept the worker polling: "
              f"{answered} doorbells back")
        assert queries > 0 and stores > 0
        # At most one: the doorbell that carried the query may still count as a poke's.
        assert answered <= 1
        # The flag with a doorbell is a poke, and answered.
        c.poke32(flag, 1)
        assert c.doorbell()
        c.sock.settimeout(5)
        assert c.sock.recv(1) == b"\x01"
    finally:
        c.close(clean=False)
        busy.close()
    assert d.alive()


HOLDER = r"""
import sys
import psycopg2
conn = psycopg2.connect("")
conn.autocommit = True
cur = conn.cursor()
cur.execute("select pg_backend_pid()")
print(cur.fetchone()[0], flush=True)
sys.stdin.read()
"""


@pytest.mark.timeout(90)
@pytest.mark.serial  # bounds a bystander's slowest query at 100 ms: another test's load would not
def test_stuck_rdma_teardown_does_not_stall_the_worker(start_l5pgd, shim):
    """An RDMA client that stops acknowledging (SIGSTOP: its soft device thread stops too)
    while its backend is terminated: l5pgd writes the FATAL error into its ring and
    closes the session. Waiting for that write's completion must not stall a bystander
    on the same worker (before the fix: up to rdma.completion_timeout_ms)."""
    timeout_ms = 3000
    d = start_l5pgd(*rdma_overrides(), f"rdma.completion_timeout_ms={timeout_ms}")
    bystander = psycopg2.connect(unix_target(d).dsn(application_name="l5pg-bystander"),
                                 connect_timeout=5)
    bystander.autocommit = True
    holder = popen([sys.executable, "-c", HOLDER], rdma_target(d), stdin=subprocess.PIPE,
                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        backend = int(holder.stdout.readline())
        assert d.metric("l5pg_sessions_total", transport="rdma") == 1, d.log_tail()
        os.kill(holder.pid, signal.SIGSTOP)
        worst = 0.0
        with bystander.cursor() as cur:
            cur.execute("select pg_terminate_backend(%s)", (backend,))
            assert cur.fetchone() == (True,)
            end = time.monotonic() + 2.0
            while time.monotonic() < end:
                t0 = time.perf_counter()
                cur.execute("select 1")
                cur.fetchone()
                worst = max(worst, time.perf_counter() - t0)
        print(f"bystander's slowest query while the RDMA session closed: {worst * 1000:.1f} ms")
        assert worst < 0.1, f"a bystander query took {worst * 1000:.0f} ms"
        # The close really waited for the stopped client (so the test exercised the wait).
        wait_for(lambda: "did not acknowledge our last writes" in d.log_text(),
                 timeout_ms / 1000 + 5, "the lingering RDMA channel to time out")
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        stop_process(holder)
        bystander.close()
    assert d.alive()


@pytest.mark.timeout(90)
def test_lingering_rdma_channels_are_bounded(start_l5pgd, shim):
    """Two RDMA clients stop acknowledging (SIGSTOP) and their backends are terminated: with
    limits.max_sessions=4 one closed channel may wait for its client (a quarter of the
    sessions), the other goes at once, said in the log. (Lingering channels had no bound: a
    client that made each session it closed linger held their slots, descriptors and memory
    beyond every limit.)"""
    timeout_ms = 5000
    d = start_l5pgd(*rdma_overrides(), f"rdma.completion_timeout_ms={timeout_ms}",
                    "limits.max_sessions=4")
    holders = [popen([sys.executable, "-c", HOLDER], rdma_target(d), stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) for _ in range(2)]
    try:
        backends = [int(h.stdout.readline()) for h in holders]
        assert d.metric("l5pg_sessions_total", transport="rdma") == 2, d.log_tail()
        for h in holders:
            os.kill(h.pid, signal.SIGSTOP)
        for backend in backends:
            run(psql_cmd("-c", f"select pg_terminate_backend({backend})"), unix_target(d))
        wait_for(lambda: "channels of this worker wait for that already" in d.log_text(),
                 timeout_ms / 1000 / 2, "the second closed channel to go at once")
        wait_for(lambda: "did not acknowledge our last writes" in d.log_text(),
                 timeout_ms / 1000 + 5, "the lingering channel to time out")
    finally:
        for h in holders:
            os.kill(h.pid, signal.SIGCONT)
            stop_process(h)
    assert d.alive()


@pytest.mark.parametrize("owner", ["nobody", "socket-owner"])
def test_marker_is_trusted_only_from_the_sockets_owner(cluster, shim, owner):
    """A `.s.PGSQL.<port>.l5pg` marker planted next to a real Postgres socket by another
    user is ignored: the shimmed psql connects to Postgres normally. The same marker owned
    by the socket's owner is believed (and the connection fails, as Postgres refuses the
    upgrade request), which shows that the planted marker was otherwise valid."""
    sock = cluster.socket_dir / f".s.PGSQL.{cluster.port}"
    marker = Path(f"{sock}.l5pg")
    st = os.stat(sock)
    marker.write_text(f"l5pgd 1 {st.st_ino} {os.getpid()}\n")
    try:
        uid = pwd.getpwnam("nobody").pw_uid if owner == "nobody" else st.st_uid
        os.chown(marker, uid, -1)
        assert uid != st.st_uid or owner == "socket-owner"
        target = Target("direct-unix-shim", str(cluster.socket_dir), cluster.port, preload=True,
                        transport_off=False)
        r = run(psql_cmd("-c", "select 'direct', 6 * 7"), target, check=False,
                env={"L5PG_DEBUG": "1"})
    finally:
        marker.unlink()
    if owner == "nobody":
        assert r.returncode == 0 and r.stdout.strip() == "direct|42", r.stderr
        assert "ignoring an l5pgd marker" in r.stderr, r.stderr
    else:
        assert r.returncode != 0, r.stdout


def closed_by_peer(s, timeout):
    """True once recv() reports EOF (or a reset) within `timeout` seconds."""
    s.settimeout(timeout)
    try:
        return s.recv(64) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_soft_wire_connections_are_capped_and_time_out(start_l5pgd):
    """Connections to the soft device's wire port still owing their 24-byte greeting are
    capped (at limits.max_sessions) and closed 5 s after they connected, however slowly
    they trickle bytes (before the fix every byte re-armed the timeout)."""
    port = free_port()
    d = start_l5pgd(*rdma_overrides("soft"), f"rdma.soft_port={port}", "limits.max_sessions=3")
    idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(2)]
    trickler = socket.create_connection(("127.0.0.1", port), timeout=5)
    opened = time.monotonic()
    extra = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        assert closed_by_peer(extra, 5), "a connection beyond the cap was kept"
        wait_for(lambda: "soft RDMA wire connections refused" in d.log_text(), 5, "the log line")
        trickled_until_close = False
        while time.monotonic() - opened < 8:
            try:
                trickler.send(b"\x00")
            except OSError:
                trickled_until_close = True
                break
            if closed_by_peer(trickler, 0.5):
                trickled_until_close = True
                break
        elapsed = time.monotonic() - opened
        assert trickled_until_close, f"a trickling connection was still open after {elapsed:.1f} s"
        assert elapsed < 7, f"the trickling connection lasted {elapsed:.1f} s"
        for s in idle:
            assert closed_by_peer(s, 5)
    finally:
        for s in idle + [trickler, extra]:
            s.close()
    assert d.alive()
