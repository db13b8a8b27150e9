"""End to end over the L5 RDMA channel: libpq programs with the shim preloaded and
L5PG_TRANSPORT=rdma talk TCP to an l5pgd with rdma.enabled, and the connection is upgraded
to RDMA (docs/wire-format.md section 5).

The device is the soft one unless L5PG_TEST_RDMA_DEVICE says otherwise (tests/rdma/hw-test.sh
runs this file with "verbs" on hosts with an RDMA NIC or Soft-RoCE).
"""
import hashlib
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.harness import fionread, paths, socket_flags
from tests.harness.cancel import PQCANCEL_SCRIPT, stop_process, wait_for_backend
from tests.harness.client import (PYTHON, Target, pgbench, popen, psql, psql_cmd, run,
                                  run_python_json, shim_debug_lines, tcp_target)
from tests.harness.l5pgd import L5pgd
from tests.harness.procstat import cpu_seconds
from tests.harness.rdma import rdma_device, rdma_env, rdma_overrides, rdma_target, upgraded_rdma
from tests.harness.waiting import wait_for

T = 200  # pgbench transactions per client


@pytest.fixture(scope="module")
def l5pgd_rdma(workdir, cluster, l5pgd_binary, shim):
    d = L5pgd(workdir / "l5pgd-rdma", cluster, workers=2, extra_overrides=rdma_overrides())
    d.start()
    yield d
    d.stop()


@pytest.fixture
def rdma(l5pgd_rdma):
    """The RDMA target; every test using it must open at least one RDMA session."""
    before = l5pgd_rdma.metric("l5pg_sessions_total", transport="rdma")
    yield rdma_target(l5pgd_rdma)
    if not l5pgd_rdma.alive():
        pytest.fail(f"l5pgd died during the test\n{l5pgd_rdma.log_tail()}", pytrace=False)
    after = l5pgd_rdma.metric("l5pg_sessions_total", transport="rdma")
    assert after > before, f"no RDMA session was opened ({before} -> {after})\n" + \
        l5pgd_rdma.log_tail()


def history_count(cluster):
    return int(cluster.sql("select count(*) from pgbench_history"))


@pytest.mark.timeout(60)
def test_psql_upgrades_to_rdma(rdma, l5pgd_rdma):
    accepted = l5pgd_rdma.metric("l5pg_upgrades_total", result="accepted")
    r = run(psql_cmd("-c", "select 'over rdma', 6 * 7"), rdma, env={"L5PG_DEBUG": "1"})
    assert r.stdout.strip() == "over rdma|42"
    assert upgraded_rdma(r.stderr), f"no 'upgraded to rdma' in the shim's output:\n{r.stderr}"
    assert f"{rdma_device()} device" in r.stderr
    assert l5pgd_rdma.metric("l5pg_upgrades_total", result="accepted") > accepted


@pytest.mark.timeout(60)
def test_silent_without_debug(rdma):
    r = run(psql_cmd("-c", "select 1"), rdma)
    assert r.stdout.strip() == "1"
    assert shim_debug_lines(r.stderr) == [], r.stderr


@pytest.mark.timeout(60)
def test_errors_and_script(rdma):
    r = psql(rdma, "select 1/0", check=False)
    assert r.returncode != 0 and "division by zero" in r.stderr, r.stderr
    script = ("create temp table t (id int primary key, v text);\n"
              "insert into t select g, repeat('x', g) from generate_series(1, 2000) g;\n"
              "select count(*), sum(length(v)) from t;\n")
    out = run(psql_cmd("-f", "-"), rdma, input=script).stdout.split("\n")
    assert "2000|2001000" in out, out


@pytest.mark.timeout(180)
@pytest.mark.parametrize("clients,threads", [(1, 1), (8, 2)], ids=["c1", "c8j2"])
def test_pgbench_select_only_prepared(rdma, pgbench_db, clients, threads):
    r = pgbench(rdma, ["-S", "-M", "prepared", "-c", clients, "-j", threads, "-t", T, "-n"])
    assert r.processed == clients * T, r.stdout
    assert r.failed == 0, r.stdout


@pytest.mark.timeout(240)
@pytest.mark.parametrize("clients,threads", [(1, 1), (8, 2)], ids=["c1", "c8j2"])
def test_pgbench_tpcb_like(rdma, pgbench_db, clients, threads):
    before = history_count(pgbench_db)
    r = pgbench(rdma, ["-c", clients, "-j", threads, "-t", T, "-n"])
    assert r.processed == clients * T, r.stdout
    assert r.failed == 0, r.stdout
    assert history_count(pgbench_db) - before == clients * T


COPY_ROWS = 40_000  # ~5 MB of COPY text: several laps of the 1 MiB rings


@pytest.mark.timeout(240)
def test_copy_round_trip(rdma, cluster, l5pgd_rdma, tmp_path):
    path = tmp_path / "copy.tsv"
    h = hashlib.sha256()
    with open(path, "wb") as f:
        for i in range(1, COPY_ROWS + 1):
            d = hashlib.md5(str(i).encode()).hexdigest()
            line = b"%d\t%s\n" % (i, (d * 4).encode())
            f.write(line)
            h.update(line)
    size = path.stat().st_size
    table = f"copy_rdma_{uuid.uuid4().hex[:8]}"
    cluster.sql(f"create unlogged table {table} (id int, payload text)")
    in0 = l5pgd_rdma.metric("l5pg_bytes_total", transport="rdma", direction="client_to_server")
    out0 = l5pgd_rdma.metric("l5pg_bytes_total", transport="rdma", direction="server_to_client")
    try:
        with open(path, "rb") as f:
            r = subprocess.run(psql_cmd("-c", f"COPY {table} FROM STDIN"), stdin=f,
                               env=rdma.env(), capture_output=True, timeout=180)
        assert r.returncode == 0, r.stderr.decode(errors="replace")
        assert r.stdout.decode().strip() == f"COPY {COPY_ROWS}"
        p = subprocess.run(psql_cmd("-c", f"COPY (select * from {table} order by id) TO STDOUT"),
                           env=rdma.env(), capture_output=True, timeout=180)
        assert p.returncode == 0, p.stderr.decode(errors="replace")
        assert len(p.stdout) == size
        assert hashlib.sha256(p.stdout).hexdigest() == h.hexdigest()
    finally:
        cluster.sql(f"drop table if exists {table}")
    assert l5pgd_rdma.metric("l5pg_bytes_total", transport="rdma",
                             direction="client_to_server") - in0 >= size
    assert l5pgd_rdma.metric("l5pg_bytes_total", transport="rdma",
                             direction="server_to_client") - out0 >= size


@pytest.mark.serial  # the cancel seen within 2 s: another test's load could delay it
@pytest.mark.timeout(60)
def test_cancel_backend(rdma, cluster):
    app = f"l5pg-rdma-cancel-{uuid.uuid4().hex[:8]}"
    p = popen(psql_cmd("-c", "select pg_sleep(60)"), rdma, env={"PGAPPNAME": app}, text=True)
    try:
        pid = wait_for_backend(cluster, app)
        assert cluster.sql(f"select pg_cancel_backend({pid})") == "t"
        t0 = time.monotonic()
        _, err = p.communicate(timeout=10)
        assert p.returncode != 0
        assert "canceling statement due to user request" in err, err
        assert time.monotonic() - t0 < 2.0
    finally:
        stop_process(p)


@pytest.mark.serial  # the cancel seen within 2 s: another test's load could delay it
@pytest.mark.timeout(60)
def test_cancel_psql_sigint(rdma, cluster):
    """psql's Ctrl-C: PQcancel opens a new TCP connection (never upgraded) from the signal
    handler, l5pgd forwards the CancelRequest."""
    app = f"l5pg-rdma-sigint-{uuid.uuid4().hex[:8]}"
    p = popen(psql_cmd("-c", "select pg_sleep(60)"), rdma, env={"PGAPPNAME": app}, text=True)
    try:
        wait_for_backend(cluster, app)
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=10)
        assert p.returncode != 0
        assert "canceling statement due to user request" in err, err
        assert time.monotonic() - t0 < 2.0
    finally:
        stop_process(p)


@pytest.mark.serial  # the cancel seen within 2 s: another test's load could delay it
@pytest.mark.timeout(60)
def test_cancel_psycopg2(rdma):
    out, _ = run_python_json(rdma, PQCANCEL_SCRIPT, timeout=30)
    assert out["result"] == "canceled", out
    assert "canceling statement due to user request" in out["message"]
    assert out["after_cancel"] < 2.0, out
    assert out["after"] == 5


@pytest.mark.timeout(60)
def test_metrics_show_rdma_sessions(rdma, l5pgd_rdma):
    psql(rdma, "select 1")
    text = l5pgd_rdma.metrics_text()
    assert 'l5pg_sessions_total{transport="rdma"}' in text
    assert l5pgd_rdma.metric("l5pg_sessions_total", transport="rdma") > 0
    assert l5pgd_rdma.metric("l5pg_bytes_total", transport="rdma", direction="client_to_server") > 0
    assert l5pgd_rdma.metric("l5pg_bytes_total", transport="rdma", direction="server_to_client") > 0
    # Closed sessions leave the active gauge (psql exited; give l5pgd a moment).
    deadline = time.monotonic() + 5
    while l5pgd_rdma.metric("l5pg_sessions_active", transport="rdma") > 0:
        assert time.monotonic() < deadline, "RDMA sessions still active after their clients left"
        time.sleep(0.05)


@pytest.mark.timeout(60)
def test_plain_clients_unaffected(l5pgd_rdma):
    """Without the shim, the same TCP port serves plain PG sessions."""
    assert psql(tcp_target(l5pgd_rdma), "select 'plain'") == "plain"


@pytest.mark.timeout(60)
def test_fallback_when_l5pgd_has_no_rdma(l5pgd, shim):
    """The shim asks, an l5pgd without rdma.enabled declines, the session stays on TCP."""
    t = Target("rdma-declined", l5pgd.host, l5pgd.port, preload=True, transport_off=False,
               extra=rdma_env(l5pgd, L5PG_DEBUG=1))
    tcp0 = l5pgd.metric("l5pg_sessions_total", transport="tcp")
    declined0 = l5pgd.metric("l5pg_upgrades_total", result="declined")
    r = run(psql_cmd("-c", "select 'still tcp'"), t)
    assert r.stdout.strip() == "still tcp"
    assert not upgraded_rdma(r.stderr)
    assert any("declined the RDMA upgrade" in ln for ln in shim_debug_lines(r.stderr)), r.stderr
    assert l5pgd.metric("l5pg_sessions_total", transport="tcp") > tcp0
    assert l5pgd.metric("l5pg_upgrades_total", result="declined") > declined0
    assert "RDMA upgrade declined: rdma.enabled is false" in l5pgd.log_text()


@pytest.mark.timeout(90)
def test_rings_beyond_max_memory_are_declined(workdir, cluster, shim):
    """rdma.max_memory bounds the rings of all RDMA sessions together (a client asks for them
    before it authenticates): here room for one session at the shim's default 1 MiB rings.
    The second stays on TCP while the first holds its rings; once it ends, the memory is
    free for the next."""
    d = L5pgd(workdir / "l5pgd-rdma-memory", cluster,
              extra_overrides=rdma_overrides() + ["rdma.max_ring_size=1048576",
                                                  "rdma.max_memory=2097152"])
    with d:
        target = rdma_target(d)
        holder = popen(psql_cmd("-c", "select pg_sleep(300)"), target, text=True)
        try:
            wait_for(lambda: d.metric("l5pg_sessions_active", transport="rdma") == 1, 20,
                     "the first RDMA session")
            tcp = d.metric("l5pg_sessions_total", transport="tcp")
            assert psql(target, "select 'second'") == "second"
            assert d.metric("l5pg_sessions_total", transport="tcp") == tcp + 1
            assert ("RDMA upgrade declined: rdma.max_memory reached (2097152 bytes of rings in "
                    "use, 2097152 more asked, 2097152 allowed)") in d.log_text()
        finally:
            stop_process(holder)
        wait_for(lambda: d.metric("l5pg_sessions_active", transport="rdma") == 0, 20,
                 "the first RDMA session to end")
        rdma_sessions = d.metric("l5pg_sessions_total", transport="rdma")
        assert psql(target, "select 'third'") == "third"
        assert d.metric("l5pg_sessions_total", transport="rdma") == rdma_sessions + 1


@pytest.mark.timeout(60)
@pytest.mark.skipif(any(Path("/sys/class/infiniband").glob("*")),
                    reason="this host has an RDMA device: the verbs device would open")
def test_fallback_when_client_has_no_device(l5pgd_rdma):
    """No verbs device in the client: nothing is sent to l5pgd, the session stays on TCP."""
    t = Target("rdma-no-device", l5pgd_rdma.host, l5pgd_rdma.port, preload=True,
               transport_off=False, extra=rdma_env(l5pgd_rdma, "verbs", L5PG_DEBUG=1))
    tcp0 = l5pgd_rdma.metric("l5pg_sessions_total", transport="tcp")
    r = run(psql_cmd("-c", "select 'no device'"), t)
    assert r.stdout.strip() == "no device"
    assert any("no RDMA device" in ln for ln in shim_debug_lines(r.stderr)), r.stderr
    assert l5pgd_rdma.metric("l5pg_sessions_total", transport="tcp") > tcp0


@pytest.mark.timeout(60)
def test_unlisted_port_untouched(l5pgd_rdma, cluster, shim):
    """L5PG_TRANSPORT=rdma never sends an upgrade request to a port not in L5PG_RDMA_PORTS
    (here: Postgres itself, which would answer it with an error)."""
    t = Target("direct", cluster.host, cluster.port, preload=True, transport_off=False,
               extra=rdma_env(l5pgd_rdma, L5PG_DEBUG=1))
    r = run(psql_cmd("-c", "select 'direct'"), t)
    assert r.stdout.strip() == "direct"
    assert not any("RDMA" in ln for ln in shim_debug_lines(r.stderr)), r.stderr


@pytest.mark.timeout(60)
def test_real_postgres_on_listed_port_is_reported(cluster, shim):
    """A port listed by mistake that leads to a real Postgres: the connection fails (it
    cannot continue after Postgres's error) and L5PG_DEBUG says why."""
    t = Target("direct", cluster.host, cluster.port, preload=True, transport_off=False,
               extra=rdma_env(None, port=cluster.port, L5PG_DEBUG=1))
    r = run(psql_cmd("-c", "select 1"), t, check=False)
    assert r.returncode != 0
    assert "not l5pgd" in r.stderr, r.stderr


FORK = r'''
import json, os, psycopg2
conn = psycopg2.connect("")
cur = conn.cursor()
cur.execute("select 1")
pid = os.fork()
if pid == 0:
    # The child never touches the parent's channel; a connection of its own works.
    try:
        c2 = psycopg2.connect("")
        k = c2.cursor()
        k.execute("select 2")
        ok = k.fetchone()[0] == 2
        c2.close()
    except Exception:
        ok = False
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
cur.execute("select 3")
print(json.dumps({"child": os.waitstatus_to_exitcode(status), "parent": cur.fetchone()[0]}))
'''


@pytest.mark.timeout(60)
def test_fork_child_uses_own_connection(rdma):
    out, _ = run_python_json(rdma, FORK, timeout=30)
    assert out == {"child": 0, "parent": 3}


def _can_use_netns():
    return os.geteuid() == 0 and shutil.which("ip") is not None and rdma_device() == "soft"


@pytest.mark.timeout(120)
@pytest.mark.skipif(not _can_use_netns(), reason="needs root, iproute2 and the soft device")
def test_client_in_another_network_namespace(workdir, cluster, l5pgd_binary, shim, pgbench_db):
    """The client runs in its own network namespace and reaches l5pgd over a veth pair:
    both the session and the soft device's wire are real (non-loopback) TCP."""
    ns = f"l5rdma{os.getpid() % 100000}"
    host_if, ns_if = f"l5h{os.getpid() % 100000}", f"l5n{os.getpid() % 100000}"
    host_ip, ns_ip = "10.231.77.1", "10.231.77.2"
    cmds = [["ip", "netns", "add", ns],
            ["ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if],
            ["ip", "link", "set", ns_if, "netns", ns],
            ["ip", "addr", "add", f"{host_ip}/30", "dev", host_if],
            ["ip", "link", "set", host_if, "up"],
            ["ip", "-n", ns, "addr", "add", f"{ns_ip}/30", "dev", ns_if],
            ["ip", "-n", ns, "link", "set", ns_if, "up"],
            ["ip", "-n", ns, "link", "set", "lo", "up"]]
    d = None
    try:
        for c in cmds:
            r = subprocess.run(c, capture_output=True, text=True)
            if r.returncode != 0:
                pytest.skip(f"cannot set up a network namespace: {' '.join(c)}: {r.stderr}")
        d = L5pgd(workdir / "l5pgd-netns", cluster, workers=1,
                  extra_overrides=rdma_overrides() + [f"listen.tcp_address={host_ip}"])
        d.host = host_ip
        d.start()
        t = rdma_target(d, host=host_ip)
        env = t.env(L5PG_DEBUG="1")
        r = subprocess.run(["ip", "netns", "exec", ns, *psql_cmd("-c", "select inet_client_addr()")],
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert upgraded_rdma(r.stderr), r.stderr
        r = subprocess.run(["ip", "netns", "exec", ns, *[str(x) for x in (
            __import__("tests.harness.paths", fromlist=["PGBENCH"]).PGBENCH,
            "-S", "-M", "prepared", "-c", 2, "-t", 100, "-n")]],
            env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "number of transactions actually processed: 200/200" in r.stdout, r.stdout
        assert d.metric("l5pg_sessions_total", transport="rdma") >= 3
    finally:
        if d is not None:
            d.stop()
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.mark.timeout(60)
def test_idle_session_costs_no_cpu(rdma, l5pgd_rdma):
    """While the client waits for a slow query, neither side spins: l5pgd's worker arms
    the session's flag and blocks, the shim arms its flag and sleeps in poll()."""
    d0 = cpu_seconds(l5pgd_rdma.proc.pid)
    p = popen(psql_cmd("-c", "select pg_sleep(2)"), rdma, text=True)
    try:
        pid, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    finally:
        stop_process(p)
    assert p.returncode == 0
    client_cpu = usage.ru_utime + usage.ru_stime
    server_cpu = cpu_seconds(l5pgd_rdma.proc.pid) - d0
    assert client_cpu < 0.5, f"psql used {client_cpu:.2f} s CPU during a 2 s sleep"
    assert server_cpu < 0.5, f"l5pgd used {server_cpu:.2f} s CPU during a 2 s sleep"


PSYCOPG3_EPOLL = r'''
import json, psycopg
with psycopg.connect("") as conn:
    print(json.dumps({"v": conn.execute("select 41 + 1").fetchone()[0]}))
'''


@pytest.mark.timeout(60)
def test_epoll_users_stay_on_tcp(l5pgd_rdma):
    """psycopg 3 waits in its own epoll; the RDMA channel cannot keep the socket readable
    for it yet, so the shim leaves such connections on TCP (and says why)."""
    t = Target("rdma-epoll", l5pgd_rdma.host, l5pgd_rdma.port, preload=True, transport_off=False,
               extra=rdma_env(l5pgd_rdma, L5PG_DEBUG=1))
    tcp0 = l5pgd_rdma.metric("l5pg_sessions_total", transport="tcp")
    for _ in range(3):
        out, r = run_python_json(t, PSYCOPG3_EPOLL, timeout=30)
        assert out == {"v": 42}
        assert not upgraded_rdma(r.stderr)
        assert any("waits in epoll" in ln for ln in shim_debug_lines(r.stderr)), r.stderr
    assert l5pgd_rdma.metric("l5pg_sessions_total", transport="tcp") >= tcp0 + 3


@pytest.mark.timeout(60)
def test_sigkill_client_frees_session(rdma, l5pgd_rdma, cluster):
    """A client killed mid-query: l5pgd sees the session socket (and the soft wire) close,
    ends the session and its upstream connection; Postgres's backend goes away."""
    app = f"l5pg-rdma-kill-{uuid.uuid4().hex[:8]}"
    p = popen(psql_cmd("-c", "select pg_sleep(30)"), rdma, env={"PGAPPNAME": app}, text=True)
    try:
        wait_for_backend(cluster, app)
        p.kill()
        p.wait(timeout=10)
        deadline = time.monotonic() + 10
        while cluster.sql(f"select count(*) from pg_stat_activity where application_name = '{app}'") != "0":
            assert time.monotonic() < deadline, "backend of the killed client still there"
            time.sleep(0.1)
        while l5pgd_rdma.metric("l5pg_sessions_active", transport="rdma") > 0:
            assert time.monotonic() < deadline, "RDMA session of the killed client still active"
            time.sleep(0.05)
    finally:
        stop_process(p)


# Flags the rings cannot carry on a connection that began as TCP (tests/harness/socket_flags.py):
# TCP's answers, and recv(MSG_TRUNC) discards what it would have copied, as tcp(7) says (the
# shim used to copy, into a buffer a caller may pass as null). The rings carry no urgent data:
# send(MSG_OOB) is EOPNOTSUPP where TCP would send it. Under MSG_WAITALL a discard takes all
# it was asked for (it stopped at 256 KiB); a null buffer elsewhere is EFAULT, not a crash.
@pytest.mark.timeout(60)
def test_flags_the_rings_cannot_carry_get_tcps_answers(rdma, l5pgd_rdma):
    out, _ = run_python_json(rdma, socket_flags.SCRIPT,
                             args=["tcp", f"{l5pgd_rdma.host}:{l5pgd_rdma.port}", str(paths.REPO)])
    assert out["transport"] == 2, out  # L5PG_TRANSPORT_RDMA
    assert out["socket"]["oob_recv"] == ["EINVAL"], out
    assert out["socket"]["errqueue"] == ["EAGAIN"], out
    assert out["socket"]["trunc"] == [5, "ff"], out  # discarded, the buffer untouched
    assert out["socket"]["null_send"] == out["socket"]["null_recv"] == ["EFAULT"], out
    assert out["socket"]["big_trunc"] == [500000, 100000, "43"], out
    # (Python names EOPNOTSUPP by its Linux alias ENOTSUP.)
    assert out["shim"] == dict(out["socket"], oob_send=["ENOTSUP"]), out


# ioctl(FIONREAD) counts the rest of the record at the read position (records behind it may
# still be landing): not 0 while recv() has bytes, never more than it returns; not the
# doorbell bytes on the socket, as the kernel would.
@pytest.mark.timeout(60)
def test_fionread_counts_what_recv_would_return(rdma, l5pgd_rdma):
    out, _ = run_python_json(rdma, fionread.SCRIPT,
                             args=["tcp", f"{l5pgd_rdma.host}:{l5pgd_rdma.port}", str(paths.REPO),
                                   "poll"])
    assert out["transport"] == 2 and out["whole"] is None, out  # L5PG_TRANSPORT_RDMA, no peek
    assert out["idle"] == 0 and out["after"] == 0, out
    assert 0 < out["first"] <= out["got"], out


# The client closes its connection but a copy of its soft device's wire stays open (here a
# dup() the script made; in life a process that holds one): l5pgd's soft queue pair sees no
# EOF, so whether the client's last WRITEs have all landed stays open. The session used to
# wait for them until limits.drain_timeout_ms (10 s), its worker polling it without a pause
# all along; now it ends once the wire has been quiet for two seconds.
WIRE_KEPT_OPEN_SCRIPT = r'''
import os, socket, sys, time, psycopg2
port = int(sys.argv[1])
conn = psycopg2.connect("")
conn.cursor().execute("select 1")
kept = []
for fd in sorted(int(name) for name in os.listdir("/proc/self/fd")):  # before any copy
    if fd < 3 or fd == conn.fileno():
        continue
    try:
        s = socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM)  # a copy
    except OSError:
        continue
    try:
        peer_port = s.getpeername()[1] if s.family == socket.AF_INET else None
    except OSError:
        peer_port = None
    if peer_port is not None and peer_port != port:
        kept.append(s)  # the soft device's wire to l5pgd
    else:
        s.close()
conn.close()
print(len(kept), flush=True)
time.sleep(60)
'''


@pytest.mark.timeout(60)
def test_client_keeping_its_wire_open_does_not_hold_the_session(rdma, l5pgd_rdma):
    if rdma_device() != "soft":
        pytest.skip("a soft device's wire")
    was_active = l5pgd_rdma.metric("l5pg_sessions_active", transport="rdma")
    p = popen([PYTHON, "-c", WIRE_KEPT_OPEN_SCRIPT, str(l5pgd_rdma.port)], rdma, text=True)
    try:
        assert p.stdout.readline().strip() == "1", "the script found no wire to keep"
        cpu_before = cpu_seconds(l5pgd_rdma.proc.pid)
        deadline = time.monotonic() + 8  # limits.drain_timeout_ms is 10 s
        while l5pgd_rdma.metric("l5pg_sessions_active", transport="rdma") > was_active:
            assert time.monotonic() < deadline, "the session waited for the open wire"
            time.sleep(0.05)
        cpu = cpu_seconds(l5pgd_rdma.proc.pid) - cpu_before
        assert cpu < 5.0, f"l5pgd used {cpu:.2f} s of CPU while the session ended"
    finally:
        stop_process(p)


# The program moves its connection to another descriptor (dup2) and closes the first, as a
# program that arranges its descriptors may: the RDMA channel's doorbells went on through the
# first number, now closed (EBADF), and the healthy connection read as closed by the peer.
MOVED_FD_SCRIPT = r'''
import ctypes, json, os, socket, sys
sys.path.insert(0, sys.argv[2])
from tests.harness import pgwire
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(pgwire.startup_packet(application_name="l5pg-moved-fd"))
pgwire.read_until_ready(s)
os.dup2(s.fileno(), 100)
s.close()
t = socket.socket(fileno=100)
t.settimeout(20)
rows = [body for kind, body in pgwire.query(t, "select repeat('y', 300000)") if kind == "D"]
print(json.dumps({"transport": ctypes.CDLL(None).l5pg_fd_transport(100),
                  "bytes": len(rows[0]) if rows else 0}))
'''


@pytest.mark.timeout(60)
def test_connection_moved_to_another_descriptor_keeps_working(rdma, l5pgd_rdma):
    out, _ = run_python_json(rdma, MOVED_FD_SCRIPT, args=[str(l5pgd_rdma.port), str(paths.REPO)],
                             timeout=40)
    assert out == {"transport": 2, "bytes": 2 + 4 + 300000}, out


# Postgres takes nothing while it runs a long statement, and the client pipelines more behind
# it: Postgres's socket fills, then the channel's ring. The worker counted the records waiting
# in the ring as work and never blocked (a CPU's worth), though they could go nowhere; the
# upstream socket wakes it when Postgres reads again.
PIPELINED_BEHIND_SLEEP_SCRIPT = r'''
import ctypes, socket, struct, sys, threading, time
sys.path.insert(0, sys.argv[2])
from tests.harness import pgwire
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(pgwire.startup_packet(application_name="l5pg-pipelined"))
pgwire.read_until_ready(s)
def query(sql):
    body = sql.encode() + b"\0"
    return b"Q" + struct.pack("!I", 4 + len(body)) + body
s.sendall(query("select pg_sleep(6)"))
threading.Thread(target=s.sendall, args=(query("select 1") * 1_000_000,), daemon=True).start()
print(ctypes.CDLL(None).l5pg_fd_transport(s.fileno()), flush=True)
time.sleep(8)
'''


@pytest.mark.timeout(60)
def test_input_postgres_does_not_take_lets_the_worker_sleep(rdma, l5pgd_rdma):
    p = popen([PYTHON, "-c", PIPELINED_BEHIND_SLEEP_SCRIPT, str(l5pgd_rdma.port), str(paths.REPO)],
              rdma, text=True)
    try:
        assert p.stdout.readline().strip() == "2", "not upgraded to RDMA"
        time.sleep(1.5)  # Postgres's socket and the ring fill
        before = cpu_seconds(l5pgd_rdma.proc.pid)
        time.sleep(2)
        used = cpu_seconds(l5pgd_rdma.proc.pid) - before
        assert used < 0.5, f"l5pgd used {used:.2f} s of CPU in 2 s while Postgres slept"
    finally:
        stop_process(p)
