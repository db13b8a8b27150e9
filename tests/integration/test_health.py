"""GET /healthz and /readyz (daemon/health.hpp): alive while every event loop goes round,
ready while alive and not draining. A worker thread stopped by ptrace, the others running,
stands for one stuck in a callback (an infinite loop, a blocking call)."""
import ctypes
import errno
import os
import subprocess
import signal
import urllib.error
import urllib.request

import pytest

from tests.harness.cancel import LONG_QUERY_CANCELLED_ON_REQUEST, stop_process, wait_for_backend
from tests.harness.client import PYTHON, popen, unix_target
from tests.harness.l5pgd import L5pgd
from tests.harness.waiting import wait_for

PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
PTRACE_DETACH = 17
WALL = 0x40000000


def get(d, path):
    """(status, body) of GET path on l5pgd's metrics endpoint."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{d.metrics_port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def thread_id(pid, name):
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            if f.read().strip() == name:
                return int(tid)
    raise AssertionError(f"no thread {name} in l5pgd {pid}")


class StoppedThread:
    """Stops one thread of another process, the others carry on (PTRACE_SEIZE and
    PTRACE_INTERRUPT send no signal, so no group stop); detached on exit."""

    def __init__(self, tid):
        self.tid = tid
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p,
                                     ctypes.c_void_p]
        self.libc.ptrace.restype = ctypes.c_long

    def _ptrace(self, request):
        if self.libc.ptrace(request, self.tid, None, None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"ptrace({request:#x}, {self.tid}): {os.strerror(err)}")

    def __enter__(self):
        try:
            self._ptrace(PTRACE_SEIZE)
        except OSError as e:
            if e.errno in (errno.EPERM, errno.ENOSYS):  # Yama ptrace_scope 3, seccomp
                pytest.skip(f"ptrace is not allowed here: {e}")
            raise
        try:
            self._ptrace(PTRACE_INTERRUPT)
            os.waitpid(self.tid, WALL)
        except BaseException:
            self._ptrace(PTRACE_DETACH)
            raise
        return self

    def __exit__(self, *exc):
        self._ptrace(PTRACE_DETACH)


@pytest.fixture
def l5pgd(workdir, cluster, l5pgd_binary):
    d = L5pgd(workdir / "l5pgd-health", cluster, workers=2)
    d.start()
    yield d
    d.stop()


def test_alive_and_ready(l5pgd):
    assert get(l5pgd, "/healthz") == (200, "ok\n")
    assert get(l5pgd, "/readyz") == (200, "ok\n")


@pytest.mark.timeout(60)
def test_a_stuck_worker_makes_l5pgd_unhealthy_until_it_goes_round(l5pgd):
    """Beyond 10 s without going round, /healthz names the worker with 503; the metrics
    thread and the main loop still answer. Once it runs again, 200."""
    tid = thread_id(l5pgd.proc.pid, "l5pgd-worker-1")
    with StoppedThread(tid):
        wait_for(lambda: get(l5pgd, "/healthz")[0] == 503, 20, "/healthz to answer 503")
        status, body = get(l5pgd, "/healthz")
        assert status == 503
        assert body.startswith("worker 1 has not gone round its event loop for "), body
        assert get(l5pgd, "/readyz")[0] == 503
        assert get(l5pgd, "/metrics")[0] == 200
    wait_for(lambda: get(l5pgd, "/healthz") == (200, "ok\n"), 10, "/healthz to recover")
    assert get(l5pgd, "/readyz") == (200, "ok\n")


@pytest.mark.timeout(60)
def test_draining_is_alive_but_not_ready(l5pgd, cluster):
    """SIGINT with a statement running: /readyz says draining (a load balancer stops sending
    new clients, which would get 57P03), /healthz stays 200 (nothing to restart)."""
    app = "l5pg-health-drain"
    p = popen([PYTHON, "-c", LONG_QUERY_CANCELLED_ON_REQUEST, app], unix_target(l5pgd),
              stdin=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "started", p.stderr.read()
        wait_for_backend(cluster, app)
        l5pgd.proc.send_signal(signal.SIGINT)
        wait_for(lambda: get(l5pgd, "/readyz")[0] == 503, 10, "/readyz to answer 503")
        assert get(l5pgd, "/readyz") == (503, "draining: new sessions are refused\n")
        assert get(l5pgd, "/healthz") == (200, "ok (draining)\n")
        p.stdin.write("cancel\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "57014"
        assert p.wait(timeout=20) == 0
    finally:
        stop_process(p)
    assert l5pgd.proc.wait(timeout=20) == 0, l5pgd.log_tail()


@pytest.mark.timeout(60)
def test_a_worker_that_does_not_end_makes_a_stopping_l5pgd_unhealthy(l5pgd):
    """SIGTERM while a worker is stuck: l5pgd waits for it to end, /healthz says ok while the
    stop may take (the stall limit; no RDMA channels here), then 503 naming the worker (the
    first of two: the second has ended): a supervisor kills what will not end by itself. Once
    the worker runs again, l5pgd ends."""
    tid = thread_id(l5pgd.proc.pid, "l5pgd-worker-0")
    with StoppedThread(tid):
        l5pgd.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: get(l5pgd, "/healthz") == (200, "ok (stopping)\n"), 10,
                 "/healthz to say stopping")
        assert get(l5pgd, "/readyz") == (503, "stopping\n")
        wait_for(lambda: get(l5pgd, "/healthz")[0] == 503, 20, "/healthz to answer 503")
        status, body = get(l5pgd, "/healthz")
        assert body.startswith("stopping for ") and body.endswith(
            "(limit 10 s): worker 0 has not ended\n"), body
    assert l5pgd.proc.wait(timeout=20) == 0, l5pgd.log_tail()
