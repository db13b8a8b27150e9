"""Facts about the machine and the software a benchmark ran on."""
import datetime
import os
import platform
import subprocess

from tests.harness import paths

from . import REPO, pgbouncer


def _first_line(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        return (r.stdout.strip().splitlines() or ["unknown"])[0]
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_average():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def git_revision():
    rev = _first_line(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"])
    dirty = _first_line(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"])
    return rev + (" (with uncommitted changes)" if dirty not in ("", "unknown") else "")


def memory_gib():
    try:
        with open("/proc/meminfo") as f:
            kib = int(f.readline().split()[1])
        return f"{kib / 2**20:.1f} GiB"
    except (OSError, ValueError, IndexError):
        return "unknown"


PG_SETTINGS = ("max_connections", "shared_buffers", "fsync", "synchronous_commit")


def postgres_settings(cluster):
    names = ",".join(f"'{n}'" for n in PG_SETTINGS)
    return cluster.sql(f"SELECT string_agg(n || ' = ' || current_setting(n), ', ') "
                       f"FROM unnest(ARRAY[{names}]) n")


def facts(cluster):
    """Ordered {label: value}; cluster is a running PgCluster (for the server version)."""
    try:
        pg_version, pg_settings = cluster.sql("SELECT version()"), postgres_settings(cluster)
    except Exception as e:  # noqa: BLE001 - a fact we could not read is reported, not fatal
        pg_version = pg_settings = f"unknown ({e})"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "cores": f"{os.cpu_count()} online, {len(os.sched_getaffinity(0))} usable by the benchmark",
        "CPU model": cpu_model(),
        "memory": memory_gib(),
        "kernel": f"{platform.system()} {platform.release()} {platform.version()}",
        "PostgreSQL": pg_version,
        "Postgres settings": pg_settings,
        "pgbench": _first_line([paths.PGBENCH, "--version"]),
        "PgBouncer": pgbouncer.version(),
        "l5pg revision": git_revision(),
        "l5pgd binary": str(paths.L5PGD),
        "load average at start": load_average(),
    }
