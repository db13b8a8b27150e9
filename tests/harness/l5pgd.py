"""Start and stop an l5pgd process in front of a PgCluster, read its log and metrics."""
import os
import pwd
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from .cluster import tail
from .paths import L5PGD
from .ports import free_port


def parse_prometheus(text):
    """Prometheus text format -> {(name, frozenset(label_items)): float}."""
    out = {}
    line_re = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?\s*$')
    label_re = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = line_re.match(line)
        if not m:
            continue
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        items = frozenset((k, v.replace('\\"', '"').replace("\\\\", "\\").replace("\\n", "\n"))
                          for k, v in label_re.findall(labels))
        try:
            out[(name, items)] = float(value)
        except ValueError:
            continue
    return out


def harness_auth_overrides(base_dir, ident_rules=(("root", "postgres"),)):
    """The client check the tests run under. Their clients run as root and ask for role
    postgres: l5pgd's default (auth.local=peer) refuses that, as Postgres's peer rule would,
    so an ident map grants exactly root -> postgres. TCP clients: the test cluster trusts
    127.0.0.1 (initdb -A trust), so auth.tcp=trust grants no more than connecting directly."""
    ident = Path(base_dir) / "ident.map"
    ident.parent.mkdir(parents=True, exist_ok=True)
    ident.write_text("".join(f"{os_user} {role}\n" for os_user, role in ident_rules))
    return [f"auth.ident_file={ident}", "auth.tcp=trust"]


class L5pgd:
    def __init__(self, base_dir, cluster, workers=2, extra_overrides=(), upstream_port=None,
                 upstream_socket_dir=None, binary=None, auth_overrides=None, user=None,
                 config_file=None, log_level="debug", start_timeout=15):
        """auth_overrides: None for harness_auth_overrides(), or a list ([] = l5pgd's defaults).
        start_timeout: seconds start() waits for "l5pgd ready" by default.
        user: run l5pgd as this OS user (as a deployment does: the README runs it as postgres).
        config_file: passed with -c (the harness's -o overrides win over it).
        log_level: None leaves logging.level to the file."""
        self.base_dir = Path(base_dir)
        self.cluster = cluster
        self.workers = workers
        self.extra_overrides = list(extra_overrides)
        self.start_timeout = start_timeout
        self.auth_overrides = (harness_auth_overrides(base_dir) if auth_overrides is None
                               else list(auth_overrides))
        self.upstream_port = upstream_port if upstream_port is not None else cluster.port
        self.upstream_socket_dir = upstream_socket_dir or cluster.socket_dir
        self.binary = Path(binary or L5PGD)
        self.socket_dir = self.base_dir / "l5sock"
        self._choose_ports()
        self._started = False  # once started, a restart keeps the ports its clients know
        self.host = "127.0.0.1"
        self.user = user
        self.config_file = config_file
        self.log_level = log_level
        self.log_path = self.base_dir / "l5pgd.log"
        self.proc = None
        self._log_file = None

    def _choose_ports(self):
        self.port = free_port()
        self.metrics_port = free_port()
        while self.metrics_port == self.port:
            self.metrics_port = free_port()

    @property
    def socket_path(self):
        return self.socket_dir / f".s.PGSQL.{self.port}"

    def command(self):
        cmd = [str(self.binary)]
        if self.config_file is not None:
            cmd += ["-c", str(self.config_file)]
        cmd += ["-o", f"listen.unix_socket_dir={self.socket_dir}",
               "-o", f"listen.port={self.port}",
               "-o", "listen.tcp_address=127.0.0.1",
               "-o", f"upstream.unix_socket_dir={self.upstream_socket_dir}",
               "-o", f"upstream.port={self.upstream_port}",
               "-o", f"metrics.listen=127.0.0.1:{self.metrics_port}",
               "-o", f"workers.count={self.workers}"]
        if self.log_level is not None:
            cmd += ["-o", f"logging.level={self.log_level}"]
        for o in self.auth_overrides + self.extra_overrides:
            cmd += ["-o", o]
        return cmd

    def start(self, timeout=None):
        """Starts l5pgd and waits until it is ready. A first start whose port another process
        took since it was chosen (free_port() is a look, not a reservation) tries again on
        other ports."""
        for _ in range(3):
            begun_at = self.log_path.stat().st_size if self.log_path.exists() else 0
            try:
                self._start(timeout)
                self._started = True
                return self
            except RuntimeError:
                if self.proc is None or not self.log_path.exists():
                    raise  # it did not get as far as running l5pgd
                with open(self.log_path, "rb") as f:
                    f.seek(begun_at)
                    taken = b"Address already in use" in f.read()
                if self._started or not taken or self.proc is None or self.proc.poll() is None:
                    raise
                self._choose_ports()
        return self._start(timeout)

    def _start(self, timeout):
        timeout = self.start_timeout if timeout is None else timeout
        if not self.binary.exists():
            raise RuntimeError(f"l5pgd binary not found at {self.binary} "
                               "(build it first, or set L5PG_BUILD_DIR)")
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.socket_dir, 0o755)
        as_user = {}
        if self.user is not None:
            pw = pwd.getpwnam(self.user)
            os.chown(self.socket_dir, pw.pw_uid, pw.pw_gid)
            as_user = dict(user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])
        self._log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=self._log_file,
                                     stderr=self._log_file, start_new_session=True, **as_user)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self._close_log()
                raise RuntimeError(f"l5pgd exited with status {code} during start\n--- log tail ---\n"
                                   + tail(self.log_path))
            if "l5pgd ready" in self.log_text() and self.socket_path.exists():
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"l5pgd not ready after {timeout}s\n--- log tail ---\n"
                                   + tail(self.log_path))
            time.sleep(0.05)

    # What AddressSanitizer, UBSan and ThreadSanitizer print when they find something: a
    # sanitizer build of l5pgd (make test's sanitizer pass) must never print them.
    SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                         "WARNING: ThreadSanitizer")

    def sanitizer_reports(self):
        text = self.log_text()
        return [line for line in text.splitlines() if any(m in line for m in self.SANITIZER_MARKERS)]

    def stop(self, timeout=10):
        """SIGTERM, wait, then SIGKILL. Returns the exit code (None if never started).
        Raises AssertionError when a sanitizer build of l5pgd reported an error."""
        if self.proc is None:
            return None
        code = self._terminate(timeout)
        reports = self.sanitizer_reports()
        if reports:
            raise AssertionError(f"l5pgd sanitizer report(s) in {self.log_path}:\n"
                                 + "\n".join(reports[:5]) + "\n--- log tail ---\n" + self.log_tail(60))
        return code

    def _terminate(self, timeout):
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        self._close_log()
        return self.proc.returncode

    def _close_log(self):
        if self._log_file is not None:
            try:
                self._log_file.close()
            except OSError:
                pass
            self._log_file = None

    RELOAD_ENDS = ("reload: done", "reload: invalid configuration")

    def reload(self, timeout=10, trigger=None):
        """SIGHUP (or `trigger()`), then wait for the reload's last log line; returns the log
        it wrote."""
        before = self.log_text()
        start = len(before)
        ends = sum(before.count(e) for e in self.RELOAD_ENDS)
        if trigger is None:
            os.kill(self.pid(), signal.SIGHUP)
        else:
            trigger()
        deadline = time.monotonic() + timeout
        while True:
            text = self.log_text()
            if sum(text.count(e) for e in self.RELOAD_ENDS) > ends:
                return text[start:]
            if time.monotonic() > deadline or not self.alive():
                raise AssertionError(f"no reload within {timeout}s\n{self.log_tail()}")
            time.sleep(0.05)

    def pid(self):
        """l5pgd's process id (a wrapper such as strace may be self.proc)."""
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    def log_text(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n=40):
        return tail(self.log_path, n)

    def metrics_text(self, timeout=5):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                    timeout=timeout) as r:
            return r.read().decode("utf-8", "replace")

    def metrics(self):
        return parse_prometheus(self.metrics_text())

    def metric(self, name, **labels):
        key = (name, frozenset((k, str(v)) for k, v in labels.items()))
        return self.metrics().get(key, 0.0)
