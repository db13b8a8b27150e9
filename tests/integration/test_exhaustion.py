"""Issue 19: l5pgd under resource exhaustion. Out of file descriptors it neither spins nor
floods its log, and a client it cannot serve is told so (SQLSTATE 53300) instead of hanging.

Each test starts its own l5pgd in front of the session's Postgres cluster.
"""
import os
import socket
import tempfile
import time
from pathlib import Path

import pytest

from tests.harness import pgwire
from tests.harness.l5pgd import L5pgd

FD_LIMIT = 256
IDLE_CLIENTS = 400


class FdLimitedL5pgd(L5pgd):
    """l5pgd with RLIMIT_NOFILE soft = hard = FD_LIMIT (prlimit execs it: same pid)."""

    def command(self):
        return ["prlimit", f"--nofile={FD_LIMIT}:{FD_LIMIT}", "--"] + super().command()


def short_dir(workdir, prefix):
    # A Unix socket path has at most 107 bytes.
    return Path(tempfile.mkdtemp(prefix=prefix, dir=workdir))


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is the state (field 3): utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


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
    d = FdLimitedL5pgd(short_dir(workdir, "l5x-"), cluster, workers=1, extra_overrides=[
        "limits.max_startup_per_peer=1000", "limits.max_startup_sessions=1000",
        "limits.startup_timeout_ms=120000"])
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
