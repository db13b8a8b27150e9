"""Client-side helpers: the connection targets under test and psql/pgbench/python runners.

Everything that goes through the shim runs in a *subprocess* with LD_PRELOAD in its
environment; the pytest process itself never loads the shim.
"""
import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from typing import Optional

from .paths import PGBENCH, PSQL, SHIM

PYTHON = "/usr/bin/python3"


def shim_preload():
    """LD_PRELOAD value for the shim. A sanitizer build of the shim needs its runtime first."""
    try:
        data = SHIM.read_bytes()
    except OSError:
        return str(SHIM), {}
    pre, extra = [], {}
    for lib in (b"libasan.so", b"libubsan.so"):
        if lib in data:
            r = subprocess.run(["ldd", str(SHIM)], capture_output=True, text=True)
            for line in r.stdout.splitlines():
                if lib.decode() in line and "=>" in line:
                    pre.append(line.split("=>")[1].split("(")[0].strip())
    if pre:
        extra = {"ASAN_OPTIONS": "detect_leaks=0:verify_asan_link_order=0"}
    return " ".join(pre[:1] + [str(SHIM)]), extra


def _clean_env():
    """os.environ without any PG*/L5PG_*/LD_PRELOAD settings inherited from the caller."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("PG") and not k.startswith("L5PG_") and k != "LD_PRELOAD"}


@dataclass
class Target:
    """A way of reaching Postgres: a name plus the libpq environment to use."""
    name: str
    host: str
    port: int
    preload: bool = False
    transport_off: bool = True
    extra: dict = field(default_factory=dict)
    dbname: str = "postgres"

    def env(self, **overrides):
        env = _clean_env()
        env.update(PGHOST=str(self.host), PGPORT=str(self.port), PGUSER="postgres",
                   PGDATABASE=self.dbname)
        if self.preload:
            env["LD_PRELOAD"], extra = shim_preload()
            env.update(extra)
        if self.transport_off:
            env["L5PG_TRANSPORT"] = "off"
        env.update(self.extra)
        for k, v in overrides.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = str(v)
        return env

    def dsn(self, dbname=None, **params):
        parts = [f"host={self.host}", f"port={self.port}", "user=postgres",
                 f"dbname={dbname or self.dbname}"]
        parts += [f"{k}={v}" for k, v in params.items()]
        return " ".join(parts)

    def __str__(self):
        return self.name


def shm_target(l5pgd):
    """libpq over the l5pgd Unix socket with the shim preloaded (upgraded to shared memory)."""
    return Target("shm", str(l5pgd.socket_dir), l5pgd.port, preload=True, transport_off=False)


def tcp_target(l5pgd):
    """libpq over TCP to l5pgd, no shim."""
    return Target("tcp", l5pgd.host, l5pgd.port, preload=False, transport_off=True)


def unix_target(l5pgd):
    """libpq over the l5pgd Unix socket, no shim."""
    return Target("unix", str(l5pgd.socket_dir), l5pgd.port, preload=False, transport_off=True)


def direct_tcp_target(cluster):
    return Target("direct-tcp", cluster.host, cluster.port)


def direct_unix_target(cluster):
    return Target("direct-unix", str(cluster.socket_dir), cluster.port)


def make_target(name, l5pgd):
    return {"shm": shm_target, "tcp": tcp_target, "unix": unix_target}[name](l5pgd)


def merged_env(target, overrides=None):
    """The target's environment (or a clean one), with overrides; None values remove keys."""
    e = target.env() if target is not None else _clean_env()
    for k, v in (overrides or {}).items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = str(v)
    return e


def run(cmd, target, timeout=120, input=None, check=True, env=None, **kw):
    """Run cmd with the target's environment; returns CompletedProcess (text mode)."""
    e = merged_env(target, env)
    r = subprocess.run([str(c) for c in cmd], env=e, input=input, capture_output=True, text=True,
                       timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, cmd))} via {target} exited {r.returncode}\n"
            f"--- stdout ---\n{r.stdout[-4000:]}\n--- stderr ---\n{r.stderr[-4000:]}")
    return r


def psql_cmd(*args):
    return [PSQL, "-X", "-At", "-v", "ON_ERROR_STOP=1", *args]


def psql(target, sql, timeout=120, check=True, env=None, dbname=None):
    """Run one -c command through the target; returns stdout stripped (or the CompletedProcess
    when check=False)."""
    args = ["-c", sql]
    if dbname:
        args += ["-d", dbname]
    r = run(psql_cmd(*args), target, timeout=timeout, check=check, env=env)
    return r.stdout.strip() if check else r


@dataclass
class PgbenchResult:
    processed: int
    expected: Optional[int]
    failed: int
    tps: float
    latency_ms: float
    stdout: str
    stderr: str
    returncode: int


def parse_pgbench(stdout, stderr="", returncode=0):
    m = re.search(r"number of transactions actually processed:\s*(\d+)(?:/(\d+))?", stdout)
    if not m:
        raise AssertionError(f"pgbench output has no transaction count (exit {returncode})\n"
                             f"--- stdout ---\n{stdout[-4000:]}\n--- stderr ---\n{stderr[-4000:]}")
    processed = int(m.group(1))
    expected = int(m.group(2)) if m.group(2) else None
    f = re.search(r"number of failed transactions:\s*(\d+)", stdout)
    failed = int(f.group(1)) if f else 0
    t = re.search(r"tps\s*=\s*([0-9.]+)", stdout)
    tps = float(t.group(1)) if t else 0.0
    la = re.search(r"latency average\s*=\s*([0-9.]+)\s*ms", stdout)
    lat = float(la.group(1)) if la else 0.0
    return PgbenchResult(processed, expected, failed, tps, lat, stdout, stderr, returncode)


def pgbench(target, args, timeout=300, check=True, env=None, dbname=None, cpu=None):
    """pgbench through target; `cpu`: confined to that one CPU (taskset)."""
    cmd = [PGBENCH, *[str(a) for a in args]]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu)] + cmd
    if dbname:
        cmd.append(dbname)
    r = run(cmd, target, timeout=timeout, check=check, env=env)
    return parse_pgbench(r.stdout, r.stderr, r.returncode)


def python_env(target, **overrides):
    """Environment for a subprocess python that uses libpq through the target."""
    return target.env(**overrides)


def run_python(target, script, args=(), timeout=60, check=True, env=None, input=None):
    """Run a python snippet (via -c) in a subprocess with the target env."""
    return run([PYTHON, "-c", script, *args], target, timeout=timeout, check=check, env=env,
               input=input)


def run_python_json(target, script, args=(), timeout=60, env=None):
    """Run a snippet that prints one JSON document on its last stdout line; return it parsed."""
    r = run_python(target, script, args=args, timeout=timeout, env=env)
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    if not lines:
        raise AssertionError(f"python produced no output\n--- stderr ---\n{r.stderr[-4000:]}")
    return json.loads(lines[-1]), r


def popen(cmd, target, env=None, **kw):
    e = merged_env(target, env)
    kw.setdefault("stdin", subprocess.DEVNULL)
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen([str(c) for c in cmd], env=e, **kw)


def shim_debug_lines(stderr):
    """Lines the shim prints with L5PG_DEBUG=1."""
    return [ln for ln in stderr.splitlines() if re.match(r"l5pg(\[\d+\])?: ", ln)]


def upgraded(stderr):
    return any("upgraded to shm" in ln for ln in shim_debug_lines(stderr))


class LineReader:
    """Reads a pipe line by line on a background thread so tests can wait with a timeout."""

    def __init__(self, pipe):
        import queue
        import threading
        self._q = queue.Queue()
        self.lines = []
        self._t = threading.Thread(target=self._run, args=(pipe,), daemon=True)
        self._t.start()

    def _run(self, pipe):
        try:
            for line in iter(pipe.readline, ""):
                self._q.put(line.rstrip("\n"))
        except (ValueError, OSError):
            pass
        self._q.put(None)

    def wait_for(self, predicate, timeout):
        """Return the first line (from now on) for which predicate(line) is true, or None on
        timeout/EOF. Lines seen are appended to self.lines."""
        import queue
        import time
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                line = self._q.get(timeout=left)
            except queue.Empty:
                return None
            if line is None:
                self._q.put(None)  # keep EOF visible to later calls
                return None
            self.lines.append(line)
            if predicate(line):
                return line
