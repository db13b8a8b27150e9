"""PgBouncer (Debian's /usr/sbin/pgbouncer) in session mode in front of a PgCluster.

Runs as the unprivileged `postgres` user when we are root (PgBouncer refuses root), listens on
127.0.0.1:<port> and <dir>/.s.PGSQL.<port>, auth_type trust with an auth_file naming `postgres`.
"""
import os
import pwd
import signal
import subprocess
import time
from pathlib import Path

from tests.harness.cluster import tail
from tests.harness.ports import free_port

PGBOUNCER = Path("/usr/sbin/pgbouncer")
# Both proxies keep their server connections this long (a day: longer than any run).
KEEP_SERVERS_S = 24 * 3600
RUN_AS = "postgres"


def version():
    try:
        r = subprocess.run([str(PGBOUNCER), "--version"], capture_output=True, text=True, timeout=10)
        return r.stdout.splitlines()[0].strip()
    except (OSError, IndexError, subprocess.SubprocessError):
        return "unknown"


def _owned_by_run_user(path):
    if os.geteuid() == 0:
        pw = pwd.getpwnam(RUN_AS)
        os.chown(path, pw.pw_uid, pw.pw_gid)


class PgBouncer:
    host = "127.0.0.1"

    def __init__(self, base_dir, cluster, max_clients):
        self.base_dir = Path(base_dir)
        self.cluster = cluster
        self.max_clients = max_clients
        self.socket_dir = self.base_dir / "sock"
        self.config_path = self.base_dir / "pgbouncer.ini"
        self.auth_path = self.base_dir / "userlist.txt"
        self.log_path = self.base_dir / "pgbouncer.log"
        self.port = free_port()
        self.proc = None
        self._log = None

    @property
    def socket_path(self):
        return self.socket_dir / f".s.PGSQL.{self.port}"

    @property
    def pid(self):
        return self.proc.pid if self.alive() else None

    def config_text(self):
        return (
            "[databases]\n"
            f"* = host={self.cluster.socket_dir} port={self.cluster.port}\n"
            "\n[pgbouncer]\n"
            f"listen_addr = {self.host}\n"
            f"listen_port = {self.port}\n"
            f"unix_socket_dir = {self.socket_dir}\n"
            "auth_type = trust\n"
            f"auth_file = {self.auth_path}\n"
            "pool_mode = session\n"
            # The pool must hold every benchmark client at once.
            f"max_client_conn = {self.max_clients + 50}\n"
            f"default_pool_size = {self.max_clients + 8}\n"
            # Its server connections live as long as the benchmark, as l5pgd's do.
            f"server_idle_timeout = {KEEP_SERVERS_S}\n"
            f"server_lifetime = {KEEP_SERVERS_S}\n"
            "max_db_connections = 0\n"
            "ignore_startup_parameters = extra_float_digits\n"
            "log_connections = 0\n"
            "log_disconnections = 0\n"
            f"logfile = {self.log_path}\n")

    def write_files(self):
        for d in (self.base_dir, self.socket_dir):
            d.mkdir(parents=True, exist_ok=True)
            os.chmod(d, 0o755)
            _owned_by_run_user(d)
        self.config_path.write_text(self.config_text())
        self.auth_path.write_text('"postgres" ""\n')
        self.log_path.touch()
        for f in (self.config_path, self.auth_path, self.log_path):
            _owned_by_run_user(f)

    def start(self, timeout=15):
        if not PGBOUNCER.exists():
            raise RuntimeError(f"{PGBOUNCER} not found (apt-get install pgbouncer, or `make deps`)")
        self.write_files()
        self._log = open(self.base_dir / "pgbouncer.stderr", "ab")
        user = {"user": RUN_AS, "group": RUN_AS, "extra_groups": []} if os.geteuid() == 0 else {}
        self.proc = subprocess.Popen([str(PGBOUNCER), str(self.config_path)], stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=self._log, cwd=self.base_dir,
                                     start_new_session=True, **user)
        self._wait_listening(timeout)
        return self

    def _wait_listening(self, timeout):
        deadline = time.monotonic() + timeout
        while not self.socket_path.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"pgbouncer exited with status {self.proc.returncode} during start"
                                   f"\n--- log tail ---\n{tail(self.log_path)}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"pgbouncer not listening after {timeout}s\n--- log tail ---\n"
                                   + tail(self.log_path))
            time.sleep(0.05)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=10):
        """SIGTERM (immediate shutdown), then SIGKILL. Never raises."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, n=40):
        return tail(self.log_path, n)
