"""One measured cell: a pgbench run for (workload, target, placement, clients) with the CPU time
of every process involved.

CPU accounting, all as deltas over the pgbench process's lifetime (connection setup and
teardown included; -n, so no vacuum):
- client: pgbench's own rusage from os.wait4 (all its threads);
- proxy: l5pgd's or PgBouncer's /proc/<pid>/stat utime+stime (all threads);
- postgres: the postmaster, every live child and every child that exited in between (reaped
  children's time is in the postmaster's cutime+cstime). The "after" snapshot waits until the
  backends of the finished pgbench have exited and been reaped.
"""
import os
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass

from tests.harness import paths
from tests.harness.client import parse_pgbench

from . import cpuacct


@dataclass
class CellResult:
    tps: float
    latency_ms: float
    processed: int
    failed_tx: int
    cpu_client_s: float
    cpu_proxy_s: float
    cpu_postgres_s: float
    wall_s: float
    status: str  # "ok" or "failed: ..."

    @property
    def ok(self):
        return self.status == "ok"

    def cpu_us_per_tx(self, part=None):
        if self.processed <= 0:
            return float("nan")
        seconds = {"client": self.cpu_client_s, "proxy": self.cpu_proxy_s,
                   "postgres": self.cpu_postgres_s,
                   None: self.cpu_client_s + self.cpu_proxy_s + self.cpu_postgres_s}[part]
        return seconds * 1e6 / self.processed


def pgbench_command(workload, clients, duration, script_dir, placement):
    threads = min(clients, os.cpu_count() or 1)
    return (placement.client_prefix()
            + [paths.PGBENCH, "-n", *workload.pgbench_args(script_dir),
               "-c", str(clients), "-j", str(threads), "-T", str(duration)])


class _Killer:
    """Kills a process if it outlives its time limit (a hung pgbench must not hang the run)."""

    def __init__(self, pid, timeout):
        self.fired = False
        self._pid = pid
        self._timer = threading.Timer(timeout, self._kill)
        self._timer.daemon = True

    def _kill(self):
        self.fired = True
        try:
            os.kill(self._pid, 9)
        except ProcessLookupError:
            pass

    def __enter__(self):
        self._timer.start()
        return self

    def __exit__(self, *exc):
        self._timer.cancel()
        return False


def run_pgbench(cmd, env, timeout):
    """Run pgbench; returns (returncode, stdout, stderr, cpu seconds from its rusage, killed)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        try:
            with _Killer(proc.pid, timeout) as killer:
                _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:  # Ctrl-C: do not leave pgbench behind
            proc.kill()
            proc.wait()
            raise
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read(), err.read(), usage.ru_utime + usage.ru_stime, killer.fired


def _status(returncode, killed, res, stderr):
    if killed:
        return "failed: pgbench timed out and was killed"
    if returncode != 0 or res is None:
        last = (stderr.strip().splitlines() or ["no output"])[-1][:200]
        return f"failed: pgbench exit {returncode}: {last}"
    if res.failed or res.processed <= 0:
        return f"failed: {res.failed} failed, {res.processed} processed transactions"
    return "ok"


def measure(workload, bench_target, placement, clients, duration, services, script_dir):
    """Run one cell and return its CellResult (never raises for a failing pgbench)."""
    pg_root, proxy_pid = services.postmaster_pid, services.proxy_pid(bench_target.proxy)
    cmd = pgbench_command(workload, clients, duration, script_dir, placement)
    sessions = TransportCheck(services.l5pgd, bench_target)
    cpuacct.wait_until_quiet(pg_root)
    pg0, px0 = cpuacct.tree_cpu_seconds(pg_root), _proxy_cpu(proxy_pid)
    t0 = time.monotonic()
    rc, out, err, client_s, killed = run_pgbench(cmd, bench_target.target.env(), duration + 120)
    wall = time.monotonic() - t0
    cpuacct.wait_until_quiet(pg_root)
    pg1, px1 = cpuacct.tree_cpu_seconds(pg_root), _proxy_cpu(proxy_pid)
    try:
        res = parse_pgbench(out, err, rc)
    except AssertionError:
        res = None
    status = _status(rc, killed, res, err)
    if status == "ok":
        status = sessions.verdict(clients)
    return CellResult(
        tps=res.tps if res else 0.0, latency_ms=res.latency_ms if res else 0.0,
        processed=res.processed if res else 0, failed_tx=res.failed if res else 0,
        cpu_client_s=client_s, cpu_proxy_s=px1 - px0, cpu_postgres_s=pg1 - pg0, wall_s=wall,
        status=status)


class TransportCheck:
    """An l5pgd cell measures its transport only if pgbench's sessions used it: the shim stays
    on the socket, silently unless L5PG_DEBUG is set, when l5pgd declines the upgrade or the
    channel cannot be set up, and the cell would then measure l5pgd's Unix path under the
    name l5pgd-shm. l5pg_sessions_total{transport} must grow by at least one per client."""

    def __init__(self, l5pgd, bench_target):
        self._l5pgd = l5pgd if bench_target.proxy == "l5pgd" else None
        self._transport = bench_target.name.split("-")[1]  # l5pgd-shm -> shm, rdma-soft -> rdma
        self._before = self._count()

    def _count(self):
        if self._l5pgd is None:
            return 0.0
        return self._l5pgd.metric("l5pg_sessions_total", transport=self._transport)

    def verdict(self, clients):
        if self._l5pgd is None:
            return "ok"
        grown = self._count() - self._before
        if grown >= clients:
            return "ok"
        return (f"failed: {grown:.0f} new l5pgd sessions over {self._transport} for {clients} "
                "clients (the others stayed on the socket)")


def _proxy_cpu(pid):
    return cpuacct.tree_cpu_seconds(pid) if pid is not None else 0.0
