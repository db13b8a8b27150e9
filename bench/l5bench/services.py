"""The server side of a benchmark: a throwaway Postgres 15 cluster with pgbench data, PgBouncer
and l5pgd. Started once per benchmark, stopped on exit whatever happens."""
import subprocess
from pathlib import Path

from tests.harness import paths
from tests.harness.cluster import PgCluster
from tests.harness.l5pgd import L5pgd
from tests.harness.rdma import rdma_overrides

from .pgbouncer import KEEP_SERVERS_S, PgBouncer
from .targets import rdma_device_kind


def shared_buffers_mb():
    """1 GiB (holds pgbench scale 64), or a quarter of the memory if that is less."""
    try:
        with open("/proc/meminfo") as f:
            total_kib = int(f.readline().split()[1])
    except (OSError, ValueError, IndexError):
        return 128
    return max(128, min(1024, total_kib // 4096))


def bench_postgres_settings(max_clients):
    """Settings appended to the harness cluster's postgresql.auto.conf (read last, so they win).
    Every client may be connected directly while PgBouncer and l5pgd each keep a full idle
    pool."""
    return ("\n# l5bench\n"
            f"max_connections = {max(200, 3 * max_clients + 30)}\n"
            f"shared_buffers = {shared_buffers_mb()}MB\n")


class Services:
    def __init__(self, work_dir, scale, max_clients, l5pgd_workers, log=print):
        self.work_dir = Path(work_dir)
        self.scale = scale
        self.max_clients = max_clients
        self.l5pgd_workers = l5pgd_workers
        self.log = log
        self.cluster = PgCluster(self.work_dir / "pg")
        self.l5pgd = None
        self.pgbouncer = None

    # -- start -------------------------------------------------------------
    def start(self, need_l5pgd, need_pgbouncer):
        self.start_postgres()
        self.init_pgbench()
        if need_l5pgd:
            self.start_l5pgd()
        if need_pgbouncer:
            self.start_pgbouncer()
        return self

    def start_postgres(self):
        self.log(f"starting PostgreSQL 15 in {self.cluster.base_dir} (port {self.cluster.port})")
        self.cluster.init()
        self.cluster.add_settings(bench_postgres_settings(self.max_clients))
        self.cluster.start()
        have = int(self.cluster.sql("SHOW max_connections"))
        if have < 3 * self.max_clients + 30:
            raise RuntimeError(f"Postgres max_connections is {have}, need at least "
                               f"{3 * self.max_clients + 30} for {self.max_clients} clients")

    def init_pgbench(self):
        self.log(f"pgbench -i -s {self.scale}")
        r = subprocess.run([paths.PGBENCH, "-i", "-q", "-s", str(self.scale)], env=self.cluster.env(),
                           capture_output=True, text=True, timeout=3600)
        if r.returncode != 0:
            raise RuntimeError(f"pgbench -i failed ({r.returncode}):\n{r.stderr[-3000:]}")
        self.cluster.sql("CHECKPOINT")

    def start_l5pgd(self):
        # Server connections kept between cells, as PgBouncer's session pool keeps them, for
        # the whole run (KEEP_SERVERS_S: a full matrix's cells of one client count can be more
        # than the default 10 idle minutes apart).
        keep_ms = KEEP_SERVERS_S * 1000
        self.l5pgd = L5pgd(self.work_dir / "l5pgd", self.cluster, workers=self.l5pgd_workers,
                           extra_overrides=["logging.level=info", "pool.mode=session",
                                            f"pool.max_idle={self.max_clients + 8}",
                                            f"pool.idle_timeout_ms={keep_ms}",
                                            f"pool.server_lifetime_ms={keep_ms}",
                                            *rdma_overrides(rdma_device_kind())])
        self.l5pgd.start()  # may move to other ports if the chosen ones were taken meanwhile
        self.log(f"started l5pgd (port {self.l5pgd.port}, {self.l5pgd_workers} workers)")

    def start_pgbouncer(self):
        self.pgbouncer = PgBouncer(self.work_dir / "pgbouncer", self.cluster, self.max_clients)
        self.log(f"starting PgBouncer (port {self.pgbouncer.port}, session mode)")
        self.pgbouncer.start()

    # -- state -------------------------------------------------------------
    @property
    def postmaster_pid(self):
        try:
            return int((self.cluster.data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            return None

    @property
    def l5pgd_pid(self):
        return self.l5pgd.proc.pid if self.l5pgd is not None and self.l5pgd.alive() else None

    @property
    def pgbouncer_pid(self):
        return self.pgbouncer.pid if self.pgbouncer is not None else None

    def proxy_pid(self, proxy):
        return {"l5pgd": self.l5pgd_pid, "pgbouncer": self.pgbouncer_pid, None: None}[proxy]

    def server_roots(self):
        return [self.postmaster_pid, self.l5pgd_pid, self.pgbouncer_pid]

    def check_alive(self):
        """Raise if a proxy that was started has died (its targets would all fail)."""
        if self.l5pgd is not None and not self.l5pgd.alive():
            raise RuntimeError(f"l5pgd died (exit {self.l5pgd.proc.returncode})\n{self.l5pgd.log_tail()}")
        if self.pgbouncer is not None and not self.pgbouncer.alive():
            raise RuntimeError(f"pgbouncer died\n{self.pgbouncer.log_tail()}")
        if self.postmaster_pid is None:
            raise RuntimeError("Postgres is not running")

    # -- stop --------------------------------------------------------------
    def stop(self):
        """Stop everything that was started; never raises. Returns l5pgd's exit code."""
        code = None
        if self.pgbouncer is not None:
            self.pgbouncer.stop()
        if self.l5pgd is not None:
            code = self.l5pgd.stop()
        self.cluster.stop()
        return code
