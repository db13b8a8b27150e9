"""Idle CPU: N shim (SHM) sessions that have done one query and then sit idle, and the CPU
that l5pgd, the client process and Postgres use meanwhile. Spinning must fall back to blocking,
so an idle session should cost (almost) nothing."""
import subprocess
import time
from dataclasses import dataclass

from tests.harness.client import PYTHON, popen, shm_target

from . import cpuacct

HOLDER = """
import sys, psycopg2
conns = [psycopg2.connect("") for _ in range(int(sys.argv[1]))]
for c in conns:
    cur = c.cursor(); cur.execute("SELECT 1"); cur.fetchone(); c.rollback()
print("ready", flush=True)
sys.stdin.read()   # idle until the benchmark closes our stdin
"""

IDLE_LIMIT_PERCENT = 1.0  # l5pgd + clients, in % of one core, to call it "blocking when idle"


@dataclass
class IdleResult:
    sessions: int
    seconds: float
    l5pgd_cpu_s: float
    clients_cpu_s: float
    postgres_cpu_s: float
    shm_sessions_active: float

    def percent(self, cpu_s):
        return 100.0 * cpu_s / self.seconds

    @property
    def blocks_when_idle(self):
        return self.percent(self.l5pgd_cpu_s + self.clients_cpu_s) < IDLE_LIMIT_PERCENT


def _start_holder(l5pgd, sessions):
    proc = popen([PYTHON, "-c", HOLDER, str(sessions)], shm_target(l5pgd),
                 stdin=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        _, err = proc.communicate(timeout=10)
        raise RuntimeError(f"idle session holder failed: {err[-2000:]}")
    return proc


def _stop_holder(proc):
    try:
        proc.stdin.close()
        proc.wait(timeout=10)
    except Exception:  # noqa: BLE001 - make sure it is gone
        proc.kill()
        proc.wait()


def measure(services, sessions=10, seconds=10.0):
    l5pgd = services.l5pgd
    proc = _start_holder(l5pgd, sessions)
    try:
        active = l5pgd.metric("l5pg_sessions_active", transport="shm")
        if active < sessions:
            raise RuntimeError(f"only {active:.0f} of {sessions} idle sessions are on SHM")
        time.sleep(0.5)  # let every spin and yield budget run out
        roots = (services.l5pgd_pid, proc.pid, services.postmaster_pid)
        before = [cpuacct.tree_cpu_seconds(p) for p in roots]
        t0 = time.monotonic()
        time.sleep(seconds)
        after = [cpuacct.tree_cpu_seconds(p) for p in roots]
        elapsed = time.monotonic() - t0
    finally:
        _stop_holder(proc)
    d = [a - b for a, b in zip(after, before)]
    return IdleResult(sessions, elapsed, d[0], d[1], d[2], active)
