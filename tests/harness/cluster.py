"""A throwaway PostgreSQL 15 cluster run as the unprivileged `postgres` user."""
import os
import pwd
import shutil
import subprocess
from pathlib import Path

from .paths import PG_BIN, PSQL
from .ports import free_port


def _as_postgres(cmd):
    """Postgres refuses to run as root: wrap cmd with runuser when we are root."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--"] + [str(c) for c in cmd]
    return [str(c) for c in cmd]


def _chown_postgres(path):
    if os.geteuid() != 0:
        return
    pw = pwd.getpwnam("postgres")
    os.chown(path, pw.pw_uid, pw.pw_gid)


def tail(path, n=40):
    try:
        with open(path, "r", errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError as e:
        return f"<no log: {e}>"


class PgCluster:
    host = "127.0.0.1"

    def __init__(self, base_dir, port=None):
        self.base_dir = Path(base_dir)
        self.data_dir = self.base_dir / "data"
        self.socket_dir = self.base_dir / "sock"
        self.log_path = self.base_dir / "postgres.log"
        self.port = port or free_port()
        self.started = False

    # -- lifecycle -----------------------------------------------------------
    def init(self):
        self.base_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.base_dir, 0o755)
        _chown_postgres(self.base_dir)
        self.socket_dir.mkdir(exist_ok=True)
        os.chmod(self.socket_dir, 0o755)
        _chown_postgres(self.socket_dir)
        if not (self.data_dir / "PG_VERSION").exists():
            r = subprocess.run(
                _as_postgres([PG_BIN / "initdb", "-D", self.data_dir, "-A", "trust", "-U", "postgres",
                              "--no-sync", "-E", "UTF8", "--locale=C"]),
                capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                raise RuntimeError(f"initdb failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
        conf = (
            "\n# l5pg test harness\n"
            "listen_addresses = '127.0.0.1'\n"
            f"port = {self.port}\n"
            f"unix_socket_directories = '{self.socket_dir}'\n"
            "fsync = off\n"
            "synchronous_commit = off\n"
            "full_page_writes = off\n"
            "max_connections = 200\n"
            "shared_buffers = 128MB\n"
            "max_wal_size = 2GB\n"
            # A backend busy in a long statement notices a vanished client (e.g. l5pgd closed the
            # upstream socket after its client was SIGKILLed) only with this check enabled.
            "client_connection_check_interval = 1s\n"
            "logging_collector = off\n"
        )
        # postgresql.auto.conf is read last, so rewriting it keeps the settings current.
        auto = self.data_dir / "postgresql.auto.conf"
        with open(auto, "w") as f:
            f.write(conf)
        _chown_postgres(auto)
        return self

    def add_settings(self, text):
        """Appends postgresql.conf lines (postgresql.auto.conf, read last; before start())."""
        auto = self.data_dir / "postgresql.auto.conf"
        with open(auto, "a") as f:
            f.write(text)
        _chown_postgres(auto)

    def write_config_file(self, name, text):
        """Writes pg_hba.conf, pg_ident.conf, ... in the data directory, owned by postgres."""
        path = self.data_dir / name
        path.write_text(text)
        _chown_postgres(path)

    def start(self):
        if not (self.data_dir / "PG_VERSION").exists():
            self.init()
        # The log file must be writable by postgres.
        self.log_path.touch()
        _chown_postgres(self.log_path)
        r = subprocess.run(
            _as_postgres([PG_BIN / "pg_ctl", "-D", self.data_dir, "-w", "-t", "60", "-l", self.log_path,
                          "start"]),
            capture_output=True, text=True, timeout=90)
        if r.returncode != 0:
            raise RuntimeError(
                f"pg_ctl start failed ({r.returncode}): {r.stdout}{r.stderr}\n--- log tail ---\n"
                + tail(self.log_path))
        self.started = True
        return self

    def stop(self):
        """Immediate stop; never raises."""
        try:
            if not (self.data_dir / "postmaster.pid").exists():
                self.started = False
                return
            subprocess.run(
                _as_postgres([PG_BIN / "pg_ctl", "-D", self.data_dir, "-m", "immediate", "-w", "-t", "30",
                              "stop"]),
                capture_output=True, text=True, timeout=60)
        except Exception:
            pass
        self.started = False

    def destroy(self):
        self.stop()
        shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    # -- direct access (never through l5pgd, never with the shim) ------------
    def env(self, dbname="postgres"):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("PG") and not k.startswith("L5PG_") and k != "LD_PRELOAD"}
        env.update(PGHOST=str(self.socket_dir), PGPORT=str(self.port), PGUSER="postgres",
                   PGDATABASE=dbname, L5PG_TRANSPORT="off")
        return env

    def tcp_env(self, dbname="postgres"):
        env = self.env(dbname)
        env["PGHOST"] = self.host
        return env

    def dsn(self, dbname="postgres"):
        return f"host={self.socket_dir} port={self.port} user=postgres dbname={dbname}"

    def sql(self, query, dbname="postgres", timeout=120):
        r = subprocess.run([PSQL, "-X", "-At", "-v", "ON_ERROR_STOP=1", "-c", query],
                           env=self.env(dbname), capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"psql failed ({r.returncode}) for {query!r}: {r.stderr}")
        return r.stdout.strip()
