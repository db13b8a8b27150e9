"""Issue 19: l5pgd under resource exhaustion. Out of file descriptors it neither spins nor
floods its log, and a client it cannot serve is told so (SQLSTATE 53300) instead of hanging;
over limits.max_sessions, after its TLS negotiation, as Postgres tells it.

Each test starts its own l5pgd in front of the session's Postgres cluster.
"""
import os
import re
import signal
import socket
import tempfile
import time
from pathlib import Path

import pytest

from tests.harness import pgwire
from tests.harness.cancel import stop_process, wait_for_backend
from tests.harness.client import popen, psql_cmd, run, tcp_target
from tests.harness.l5pgd import L5pgd
from tests.harness.ports import free_port
from tests.harness.procstat import cpu_seconds, open_fds, vm_rss
from tests.harness.waiting import wait_for

FD_LIMIT = 256
IDLE_CLIENTS = 400


class FdLimitedL5pgd(L5pgd):
    """l5pgd with RLIMIT_NOFILE soft = hard = FD_LIMIT (prlimit execs it: same pid)."""

    def command(self):
        return ["prlimit", f"--nofile={FD_LIMIT}:{FD_LIMIT}", "--"] + super().command()


def short_dir(workdir, prefix):
    # A Unix socket path has at most 107 bytes.
    return Path(tempfile.mkdtemp(prefix=prefix, dir=workdir))


def unix_startup(d, timeout=5.0):
    """Connects over the Unix socket and sends a StartupMessage; returns the first reply
    (type, fields or body) or raises on timeout."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(d.socket_path))
        try:
            s.sendall(pgwire.startup_packet(user="postgres", database="postgres"))
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before it read anything: the error waits to be read, as libpq does
        typ, body = pgwire.read_message(s)
        if typ == "E":
            return typ, pgwire.parse_fields(body)
        while typ != "Z":
            typ, body = pgwire.read_message(s)
        pgwire.terminate(s)
        return typ, body
    finally:
        s.close()


@pytest.mark.timeout(120)
def test_out_of_fds_no_busy_loop_no_log_flood(workdir, cluster, l5pgd_binary):
    wire_port = free_port()
    d = FdLimitedL5pgd(short_dir(workdir, "l5x-"), cluster, workers=1, extra_overrides=[
        "limits.max_startup_per_peer=1000", "limits.max_startup_sessions=1000",
        "limits.startup_timeout_ms=120000",
        # the soft RDMA device's wire listener, which must not spin either
        "rdma.enabled=true", "rdma.device=soft", f"rdma.soft_port={wire_port}"])
    idle = []
    with d:
        pid = d.proc.pid
        for _ in range(IDLE_CLIENTS):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            s.connect(str(d.socket_path))
            idle.append(s)
        # l5pgd has run out of descriptors once it holds nearly FD_LIMIT of them.
        wait_for(lambda: open_fds(pid) >= FD_LIMIT - 2, 20, "l5pgd to reach its fd limit")

        # A scrape and a wire connection waiting meanwhile: their listeners cannot accept
        # them either.
        for port in (d.metrics_port, wire_port):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        log_before = d.log_path.stat().st_size
        cpu_before = cpu_seconds(pid)
        start = time.monotonic()
        time.sleep(5)  # the measurement window itself
        cpu = (cpu_seconds(pid) - cpu_before) / (time.monotonic() - start)
        log_growth = d.log_path.stat().st_size - log_before
        figures = f"CPU {cpu:.1%} of a core, log +{log_growth} bytes in 5 s"
        print(f"out of descriptors: {figures}")
        assert cpu < 0.10, figures
        assert log_growth < 100 * 1024, figures

        typ, fields = unix_startup(d)
        assert typ == "E" and fields.get("C") == "53300", (typ, fields)
        assert "out of file descriptors" in fields.get("M", "")

        for s in idle:
            s.close()
        idle.clear()

        def served():
            try:
                return unix_startup(d)[0] == "Z"
            except (OSError, EOFError):
                return False

        wait_for(served, 20, "a client to be served once the idle connections closed")
        assert "accepting connections again" in d.log_text()
        # Only now: the metrics endpoint needs a descriptor too.
        assert d.metric("l5pg_connections_refused_total", reason="out_of_fds") >= 1
        assert d.alive()
    for s in idle:
        s.close()


# ---------------------------------------------------------------- metrics endpoint

MiB = 1024 * 1024
METRICS_MAX_CONNECTIONS = 16  # daemon/metrics_server.cpp kMaxConnections


@pytest.fixture
def plain_l5pgd(workdir, cluster, l5pgd_binary):
    d = L5pgd(short_dir(workdir, "l5m-"), cluster, workers=1)
    with d:
        d.metrics_text()  # warm up: the first scrape allocates what every scrape reuses
        yield d


def http_response(s, timeout=10):
    """Reads what the server answers until it closes or the headers are complete."""
    s.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    return data


def stream_until_refused(s, head, total, filler=b"x"):
    """Sends `head`, then up to `total` filler bytes, stopping as soon as the server
    answers or closes. Returns the number of filler bytes sent."""
    s.sendall(head)
    chunk = filler * 65536
    sent = 0
    import select
    while sent < total:
        readable, _, _ = select.select([s], [], [], 0)
        if readable:
            break
        try:
            sent += s.send(chunk[:min(len(chunk), total - sent)])
        except (BrokenPipeError, ConnectionResetError):
            break
    return sent


def status_code(response):
    line = response.split(b"\r\n", 1)[0]
    parts = line.split()
    return int(parts[1]) if len(parts) >= 2 and parts[0].startswith(b"HTTP/") else None


@pytest.mark.timeout(120)
def test_metrics_refuses_a_huge_post_without_buffering_it(plain_l5pgd):
    d = plain_l5pgd
    rss_before = vm_rss(d.proc.pid)
    total = 300 * MiB
    with socket.create_connection(("127.0.0.1", d.metrics_port), timeout=10) as s:
        head = (f"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: {total}\r\n\r\n").encode()
        sent = stream_until_refused(s, head, total)
        status = status_code(http_response(s))
    growth = vm_rss(d.proc.pid) - rss_before
    print(f"300 MB POST: status {status} after {sent} body bytes, RSS +{growth / MiB:.1f} MiB")
    assert status in (405, 413), status
    assert growth < 5 * MiB, f"RSS grew by {growth / MiB:.1f} MiB"
    assert d.metrics_text()  # still serving


@pytest.mark.timeout(60)
def test_metrics_refuses_a_huge_header(plain_l5pgd):
    d = plain_l5pgd
    rss_before = vm_rss(d.proc.pid)
    with socket.create_connection(("127.0.0.1", d.metrics_port), timeout=10) as s:
        sent = stream_until_refused(s, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: ", MiB, b"a")
        try:
            s.sendall(b"\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        response = http_response(s)
    growth = vm_rss(d.proc.pid) - rss_before
    status = status_code(response)
    print(f"1 MB header: status {status} after {sent} bytes, RSS +{growth / MiB:.1f} MiB")
    assert status != 200 and (status is None or 400 <= status < 500), response[:200]
    assert growth < 5 * MiB, f"RSS grew by {growth / MiB:.1f} MiB"
    assert d.metrics_text()


@pytest.mark.timeout(60)
def test_metrics_does_not_buffer_what_a_client_sends_while_it_is_answered(plain_l5pgd):
    """Pipelined GETs and then a stream of bytes, nothing read back: evhttp kept reading
    while it wrote the first reply and parsed nothing meanwhile (2 GB in 8 s here). Each
    reply now ends its connection, and reading stops beyond the largest request."""
    d = plain_l5pgd
    rss_before = vm_rss(d.proc.pid)
    sent = 0
    with socket.create_connection(("127.0.0.1", d.metrics_port), timeout=10) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 2000)
        s.setblocking(False)
        chunk = b"x" * 65536
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            try:
                sent += s.send(chunk)
            except BlockingIOError:
                time.sleep(0.001)
            except (BrokenPipeError, ConnectionResetError):
                break
    growth = vm_rss(d.proc.pid) - rss_before
    print(f"pipelined GETs, then {sent / MiB:.0f} MiB: RSS +{growth / MiB:.1f} MiB")
    assert growth < 5 * MiB, f"RSS grew by {growth / MiB:.1f} MiB"
    assert d.metrics_text()


def http_request(d, method, path="/metrics"):
    with socket.create_connection(("127.0.0.1", d.metrics_port), timeout=10) as s:
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        return http_response(s)


def test_metrics_serves_get_and_head_only(plain_l5pgd):
    d = plain_l5pgd
    assert status_code(http_request(d, "GET")) == 200
    assert status_code(http_request(d, "HEAD")) == 200
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
        response = http_request(d, method)
        assert status_code(response) == 405, (method, response[:200])
        assert b"Allow: GET, HEAD" in response


@pytest.mark.timeout(60)
def test_metrics_closes_a_slow_request(plain_l5pgd):
    d = plain_l5pgd
    with socket.create_connection(("127.0.0.1", d.metrics_port), timeout=10) as s:
        s.sendall(b"GET /metr")  # and nothing more
        start = time.monotonic()
        s.settimeout(30)
        try:
            data = s.recv(65536)
            while data:
                data = s.recv(65536)
        except ConnectionResetError:
            pass
        waited = time.monotonic() - start
    assert waited < 20, f"the slow request was kept open for {waited:.0f}s"


@pytest.mark.timeout(60)
def test_metrics_connection_cap(plain_l5pgd):
    """100 connections held open and silent: l5pgd keeps at most twice its 16 at a time (the
    oldest closed as new ones come, the closed ones until libevent frees them), and a scrape
    meanwhile is served at once: it closes the oldest held one. (The cap used to stop
    accepting, so 16 silent connections kept every scrape out until they timed out.)"""
    d = plain_l5pgd
    pid = d.proc.pid
    baseline = open_fds(pid)
    held = [socket.create_connection(("127.0.0.1", d.metrics_port), timeout=10)
            for _ in range(100)]  # within the listen queue (128) plus the cap
    try:
        # baseline may still hold the warm-up scrape's descriptor (released within 100 ms)
        wait_for(lambda: open_fds(pid) >= baseline + METRICS_MAX_CONNECTIONS - 1, 10,
                 "l5pgd to accept the first metrics connections")
        most = 0
        deadline = time.monotonic() + 2  # the measurement window: l5pgd must not take more
        while time.monotonic() < deadline:
            most = max(most, open_fds(pid))
            time.sleep(0.05)
        assert most <= baseline + 2 * METRICS_MAX_CONNECTIONS + 1, (baseline, most)
        with socket.create_connection(("127.0.0.1", d.metrics_port), timeout=3) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert status_code(http_response(s)) == 200
    finally:
        for s in held:
            s.close()
    wait_for(lambda: status_code(http_request(d, "GET")) == 200, 20,
             "the endpoint to serve again once the connections closed")


# ---------------------------------------------------------------- one memfd, two sessions

def test_memfd_attached_twice_is_declined(plain_l5pgd):
    import re
    from tests.harness import l5wire
    d = plain_l5pgd
    size = 64 * 1024
    fd = l5wire.make_memfd(size, size)
    first = second = third = None
    try:
        first = l5wire.connect_unix(d.socket_path)
        assert l5wire.send_upgrade(first, size, size, fd) == b"L"
        second = l5wire.connect_unix(d.socket_path)
        assert l5wire.send_upgrade(second, size, size, fd) == b"N"
        pattern = re.compile(r"session (\d+): upgrade declined: the memfd is already attached "
                             r"to session (\d+)")
        wait_for(lambda: pattern.search(d.log_text()), 5, "the decline in the log")
        declined, holder = pattern.search(d.log_text()).groups()
        assert declined != holder
        # Declined, the client carries on over its socket.
        second.sendall(pgwire.startup_packet(user="postgres", database="postgres"))
        assert pgwire.read_until_ready(second)[-1][0] == "Z"
        assert pgwire.query(second, "select 1")[-1][0] == "Z"

        first.close()
        first = None
        # Once attached, the memfd is sealed for good (no hole punching, no new writer): it
        # served its session and is declined from then on, with the reason.
        def declined_as_sealed():
            nonlocal third
            if third is not None:
                third.close()
            third = l5wire.connect_unix(d.socket_path)
            assert l5wire.send_upgrade(third, size, size, fd) == b"N"
            return "memfd is already sealed against writing" in d.log_text()

        wait_for(declined_as_sealed, 10, "the decline, with the reason, once its session closed")
    finally:
        for s in (first, second, third):
            if s is not None:
                s.close()
        os.close(fd)


# ---------------------------------------------------------------- log hygiene

def refused_startup(d, packet):
    """Sends `packet` over the Unix socket; returns l5pgd's ErrorResponse fields."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(str(d.socket_path))
        s.sendall(packet)
        typ, body = pgwire.read_message(s)
        assert typ == "E", typ
        return pgwire.parse_fields(body)
    finally:
        s.close()


def session_lines(log, session_id):
    return [line for line in log.splitlines() if f"session {session_id}:" in line]


def test_startup_refusals_name_their_reason_once(plain_l5pgd):
    d = plain_l5pgd
    bad_length = refused_startup(d, b"\x00\x00\x00\x03")
    no_role = refused_startup(d, pgwire.startup_packet(user="nosuchrole", database="postgres"))
    assert no_role["C"] == "28000"
    log = d.log_text()
    for fields in (bad_length, no_role):
        reason = fields["M"]
        lines = [line for line in log.splitlines() if reason in line]
        assert lines, f"{reason!r} not logged"
        # One line per refusal, naming the reason once (it was 'X: X', and logged twice).
        assert all(line.count(reason) == 1 for line in lines), lines
        assert len(lines) == 1, lines


@pytest.mark.timeout(60)
def test_client_triggered_warnings_are_rate_limited(plain_l5pgd):
    d = plain_l5pgd
    packet = pgwire.startup_packet(user="nosuchrole", database="postgres")
    start = len(d.log_text())
    began = time.monotonic()
    for _ in range(300):
        assert refused_startup(d, packet)["C"] == "28000"
    windows = int((time.monotonic() - began) // 5) + 1  # the limiter's, 10 lines each
    text = d.log_text()[start:]
    logged = text.count("refused uid")
    assert 1 <= logged <= 10 * windows, f"{logged} log lines for 300 refusals in {windows} windows"

    # Every refusal is logged or counted: in the suffix of a later line, or, with no further
    # refusal, in a line of its own once the limiter's 5 s are over.
    summary = re.compile(r"(\d+) similar messages not logged since the last one \(logins refused\)")
    suffix = re.compile(r"refused uid .*\((\d+) similar messages not logged\)")

    def counted():
        text = d.log_text()[start:]
        return sum(int(n) for n in summary.findall(text) + suffix.findall(text))

    wait_for(lambda: logged + counted() == 300, 15, "every suppressed refusal counted")
    assert d.metric("l5pg_auth_failures_total", transport="unix", reason="peer_mismatch") >= 300


@pytest.mark.timeout(60)
def test_startup_timeouts_are_rate_limited(workdir, cluster, l5pgd_binary):
    d = L5pgd(short_dir(workdir, "l5t-"), cluster, workers=2,
              extra_overrides=["limits.startup_timeout_ms=200"])
    with d:
        idle = [unix_connect(d) for _ in range(60)]
        try:
            for s in idle:
                assert pgwire.at_eof(s, timeout=10), "l5pgd kept a silent client past its timeout"
        finally:
            for s in idle:
                s.close()
        logged = d.log_text().count("startup packet timeout")
        assert 1 <= logged <= 10, f"{logged} lines for 60 startup timeouts"


def unix_connect(d):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(str(d.socket_path))
    return s


@pytest.mark.timeout(120)
def test_a_client_over_max_sessions_is_told_so_after_tls_negotiation(workdir, cluster, l5pgd_binary):
    """Over limits.max_sessions l5pgd answers as Postgres over max_connections: after the TLS
    negotiation (libpq's default sslmode=prefer asks for it over TCP, and libpq 17.1, 16.5,
    15.9 and later show only "server sent an error response during SSL exchange" for an error
    sent before), at the StartupMessage, FATAL 53300. A CancelRequest is still forwarded: the
    query of the session that fills l5pgd can be cancelled (psql's Ctrl-C). As in Postgres, a
    connection takes a place only with its StartupMessage: an idle one keeps nobody out, and
    one that came while l5pgd was full is served if a place came free before it."""
    d = L5pgd(short_dir(workdir, "l5m-"), cluster, workers=1,
              extra_overrides=["limits.max_sessions=1"])
    app = "l5pg-full"
    with d:
        target = tcp_target(d)
        idle = socket.create_connection(("127.0.0.1", d.port), timeout=10)  # sends nothing
        holder = popen(psql_cmd("-c", "select pg_sleep(60)"), target, env={"PGAPPNAME": app},
                       text=True)
        try:
            wait_for_backend(cluster, app)
            for sslmode in ("prefer", "disable"):
                r = run(psql_cmd("-c", "select 1"), target, env={"PGSSLMODE": sslmode},
                        check=False)
                assert r.returncode != 0, r.stdout
                assert "FATAL:  l5pgd: too many connections (limits.max_sessions reached)" in \
                    r.stderr, (sslmode, r.stderr)
            typ, fields = unix_startup(d)
            assert typ == "E" and fields.get("C") == "53300", (typ, fields)
            came_while_full = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            came_while_full.settimeout(10)
            came_while_full.connect(str(d.socket_path))
            holder.send_signal(signal.SIGINT)
            _, err = holder.communicate(timeout=20)
            assert "canceling statement due to user request" in err, err
        finally:
            stop_process(holder)
            idle.close()
        with came_while_full:
            wait_for(lambda: d.metric("l5pg_sessions_active", transport="tcp") == 0, 20,
                     "the first session to end")
            came_while_full.sendall(pgwire.startup_packet(user="postgres", database="postgres"))
            assert pgwire.read_until_ready(came_while_full)[-1][0] == "Z"
        assert d.metric("l5pg_connections_refused_total", reason="max_sessions") == 3
        assert "too many connections (limits.max_sessions reached)" in d.log_text()
        wait_for(lambda: unix_startup(d)[0] == "Z", 20, "a client to be served once the first left")


@pytest.mark.timeout(60)
def test_declined_upgrade_requests_take_no_place(workdir, cluster, l5pgd_binary):
    """A client that may not be served (auth.tcp=reject, auth.local=reject) gets its upgrade
    request declined without taking one of limits.max_sessions' places: it asked for rings
    before the check that declines it took a place, which it held until it left (clients that
    kept such connections open filled l5pgd)."""
    from tests.harness import l5wire
    from tests.harness.rdma import rdma_overrides

    d = L5pgd(short_dir(workdir, "l5d-"), cluster, workers=1,
              extra_overrides=["limits.max_sessions=1", "auth.tcp=reject",
                               *rdma_overrides("soft")])
    with d:
        held = []
        try:
            rdma = pgwire.connect(d.host, d.port)
            held.append(rdma)
            assert l5wire.send_upgrade(rdma, 64 * 1024, 64 * 1024,
                                       transport=l5wire.L5_TRANSPORT_RDMA) == b"N"
            typ, _ = unix_startup(d)
            assert typ == "Z", "a local client was refused while a rejected one held a place"
        finally:
            for s in held:
                s.close()
        assert "RDMA upgrade declined: auth.tcp is reject" in d.log_text()
    d = L5pgd(short_dir(workdir, "l5d-"), cluster, workers=1, auth_overrides=["auth.local=reject"],
              extra_overrides=["limits.max_sessions=1"])
    with d:
        shm = l5wire.connect_unix(d.socket_path)
        fd = l5wire.make_memfd(64 * 1024, 64 * 1024)
        try:
            assert l5wire.send_upgrade(shm, 64 * 1024, 64 * 1024, fd=fd) == b"N"
        finally:
            os.close(fd)
            shm.close()
        # (Logged right after the answer went out.)
        wait_for(lambda: "upgrade declined: auth.local is reject" in d.log_text(), 10,
                 "the decline to be logged")
