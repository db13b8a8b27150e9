"""Start and stop an l5pgd process in front of a PgCluster, read its log and metrics."""
import os
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


class L5pgd:
    def __init__(self, base_dir, cluster, workers=2, extra_overrides=(), upstream_port=None,
                 upstream_socket_dir=None, binary=None):
        self.base_dir = Path(base_dir)
        self.cluster = cluster
        self.workers = workers
        self.extra_overrides = list(extra_overrides)
        self.upstream_port = upstream_port if upstream_port is not None else cluster.port
        self.upstream_socket_dir = upstream_socket_dir or cluster.socket_dir
        self.binary = Path(binary or L5PGD)
        self.socket_dir = self.base_dir / "l5sock"
        self.port = free_port()
        self.metrics_port = free_port()
        while self.metrics_port == self.port:
            self.metrics_port = free_port()
        self.host = "127.0.0.1"
        self.log_path = self.base_dir / "l5pgd.log"
        self.proc = None
        self._log_file = None

    @property
    def socket_path(self):
        return self.socket_dir / f".s.PGSQL.{self.port}"

    def command(self):
        cmd = [str(self.binary),
               "-o", f"listen.unix_socket_dir={self.socket_dir}",
               "-o", f"listen.port={self.port}",
               "-o", "listen.tcp_address=127.0.0.1",
               "-o", f"upstream.unix_socket_dir={self.upstream_socket_dir}",
               "-o", f"upstream.port={self.upstream_port}",
               "-o", f"metrics.listen=127.0.0.1:{self.metrics_port}",
               "-o", f"workers.count={self.workers}",
               "-o", "logging.level=debug"]
        for o in self.extra_overrides:
            cmd += ["-o", o]
        return cmd

    def start(self, timeout=15):
        if not self.binary.exists():
            raise RuntimeError(f"l5pgd binary not found at {self.binary} "
                               "(build it first, or set L5PG_BUILD_DIR)")
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.socket_dir, 0o755)
        self._log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=self._log_file,
                                     stderr=self._log_file, start_new_session=True)
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

    def stop(self, timeout=10):
        """SIGTERM, wait, then SIGKILL. Returns the exit code (None if never started)."""
        if self.proc is None:
            return None
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
