"""systemd's Type=notify protocol (sd_notify(3)) against a NOTIFY_SOCKET this test owns:
READY=1 once l5pgd accepts, RELOADING=1/READY=1 around SIGHUP, STATUS=, WATCHDOG=1 every
quarter of WATCHDOG_USEC, STOPPING=1 on SIGTERM, and on SIGINT only once the drain is over."""
import os
import re
import signal
import socket
import time

import pytest

from tests.harness.client import popen, psql_cmd, unix_target
from tests.harness.l5pgd import L5pgd


class NotifySocket:
    """The service manager's end: a datagram socket collecting what l5pgd sends."""

    def __init__(self, address):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        # '@name' in NOTIFY_SOCKET is "\0name" for the kernel (the abstract namespace).
        self.sock.bind("\0" + address[1:] if address.startswith("@") else address)
        self.address = address
        self.messages = []

    def collect(self, timeout):
        self.sock.settimeout(timeout)
        try:
            while True:
                self.messages.append(self.sock.recv(4096).decode())
        except socket.timeout:
            pass

    def wait_for(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                message = self.sock.recv(4096).decode()
            except socket.timeout:
                break
            self.messages.append(message)
            fields = dict(line.split("=", 1) for line in message.splitlines() if "=" in line)
            if predicate(fields):
                return fields
        raise AssertionError(f"no {what} within {timeout}s; got {self.messages}")

    def close(self):
        self.sock.close()


@pytest.fixture(params=["path", "abstract"])
def notify(request, tmp_path):
    address = (str(tmp_path / "notify.sock") if request.param == "path"
               else f"@l5pg-test-notify-{os.getpid()}-{time.monotonic_ns()}")
    s = NotifySocket(address)
    yield s
    s.close()


@pytest.mark.serial  # two watchdog pings within 1.5 s: another test's load could delay them
@pytest.mark.timeout(60)
def test_notify_protocol(workdir, cluster, notify, monkeypatch, request):
    monkeypatch.setenv("NOTIFY_SOCKET", notify.address)
    monkeypatch.setenv("WATCHDOG_USEC", "400000")  # pings every 100 ms
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    d = L5pgd(workdir / f"notify-{request.node.callspec.id}", cluster, workers=1)
    d.start()
    try:
        ready = notify.wait_for(lambda f: f.get("READY") == "1", 10, "READY=1")
        # READY=1 comes once the listener accepts.
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.connect(str(d.socket_path))
        assert re.match(r"sessions: \d+ \(shm \d+, unix \d+, tcp \d+, rdma \d+\)", ready["STATUS"])

        start = time.monotonic()
        notify.wait_for(lambda f: "WATCHDOG" in f, 2, "a first WATCHDOG=1")
        notify.wait_for(lambda f: "WATCHDOG" in f, 2, "a second WATCHDOG=1")
        assert time.monotonic() - start < 1.5

        before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        d.proc.send_signal(signal.SIGHUP)
        reloading = notify.wait_for(lambda f: f.get("RELOADING") == "1", 10, "RELOADING=1")
        after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        assert before <= int(reloading["MONOTONIC_USEC"]) <= after
        notify.wait_for(lambda f: f.get("READY") == "1", 10, "READY=1 after the reload")

        sleeper = popen(psql_cmd("-c", "select pg_sleep(3)"), unix_target(d))
        status = notify.wait_for(lambda f: "unix 1" in f.get("STATUS", ""), 5,
                                 "STATUS= with the open session")
        assert status["STATUS"].startswith("sessions: 1 "), status
        assert sleeper.wait(timeout=30) == 0

        d.proc.send_signal(signal.SIGTERM)
        notify.wait_for(lambda f: f.get("STOPPING") == "1", 10, "STOPPING=1")
        d.proc.wait(timeout=10)
    finally:
        d.stop()


@pytest.mark.timeout(60)
def test_sigint_drain_is_not_a_stop_for_systemd(workdir, cluster, tmp_path, monkeypatch):
    """SIGINT's drain says "draining" in STATUS= and STOPPING=1 only when it is over: systemd
    takes STOPPING=1 for a stop it then bounds by TimeoutStopSec, and SIGKILLed a drain
    begun by hand (`kill -INT`) after it, without a word to the clients."""
    notify = NotifySocket(str(tmp_path / "notify.sock"))
    monkeypatch.setenv("NOTIFY_SOCKET", notify.address)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    d = L5pgd(workdir / "notify-drain", cluster, workers=1)
    d.start()
    sleeper = None
    try:
        notify.wait_for(lambda f: f.get("READY") == "1", 10, "READY=1")
        sleeper = popen(psql_cmd("-c", "select pg_sleep(3)"), unix_target(d))
        notify.wait_for(lambda f: "unix 1" in f.get("STATUS", ""), 5, "the open session")
        d.proc.send_signal(signal.SIGINT)
        draining = notify.wait_for(lambda f: "draining" in f.get("STATUS", ""), 5, "draining")
        assert "STOPPING" not in draining
        assert sleeper.wait(timeout=30) == 0
        stopping = notify.wait_for(lambda f: f.get("STOPPING") == "1", 10, "STOPPING=1")
        assert all("STOPPING" not in m for m in notify.messages[:-1]), notify.messages
        assert d.proc.wait(timeout=10) == 0
        assert stopping
    finally:
        if sleeper is not None and sleeper.poll() is None:
            sleeper.kill()
        d.stop()
        notify.close()


def test_without_notify_socket(l5pgd):
    """Without NOTIFY_SOCKET (the harness's l5pgd, not under systemd) SIGHUP reloads all the
    same, and an unchanged configuration applies nothing."""
    assert "NOTIFY_SOCKET" not in os.environ
    log = l5pgd.reload()
    assert "no key to apply" in log and "systemd" not in log, log
