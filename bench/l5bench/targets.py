"""The connection targets a benchmark compares, and which proxy (if any) each goes through."""
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from tests.harness.client import (Target, direct_tcp_target, direct_unix_target, shm_target,
                                  tcp_target, unix_target)

TARGET_NAMES = ("direct-tcp", "direct-unix", "pgbouncer-tcp", "pgbouncer-unix",
                "l5pgd-tcp", "l5pgd-unix", "l5pgd-shm", "l5pgd-rdma")
DIRECT = ("direct-tcp", "direct-unix")
RDMA_SYSFS = Path("/sys/class/infiniband")


@dataclass(frozen=True)
class BenchTarget:
    name: str
    target: Target
    proxy: Optional[str]  # "l5pgd", "pgbouncer" or None (direct)


def proxy_of(name):
    if name.startswith("l5pgd-"):
        return "l5pgd"
    if name.startswith("pgbouncer-"):
        return "pgbouncer"
    return None


def validate(names):
    unknown = [n for n in names if n not in TARGET_NAMES]
    if unknown:
        raise ValueError(f"unknown target(s) {', '.join(unknown)}; "
                         f"choose from {', '.join(TARGET_NAMES)}")


def rdma_skip_reason():
    """Why l5pgd-rdma cannot run here, or None if it can.

    Hook: once l5pgd and libl5pg.so speak RDMA, return None when a device exists and fill in
    rdma_target() below; the rest of the harness treats it like any other target."""
    devices = sorted(p.name for p in RDMA_SYSFS.iterdir()) if RDMA_SYSFS.is_dir() else []
    if not devices:
        return f"no RDMA device ({RDMA_SYSFS} is empty or missing)"
    return (f"RDMA device(s) {', '.join(devices)} present, but l5pgd/libl5pg.so have no RDMA "
            "transport yet")


def rdma_target(l5pgd):
    """The shim over RDMA to l5pgd's TCP endpoint (for when the RDMA transport exists)."""
    return Target("l5pgd-rdma", l5pgd.host, l5pgd.port, preload=True, transport_off=False,
                  extra={"L5PG_TRANSPORT": "rdma"})


def runnable(names):
    """(names that can run here, {name: reason} for those skipped)."""
    skipped = {}
    if "l5pgd-rdma" in names:
        reason = rdma_skip_reason()
        if reason:
            skipped["l5pgd-rdma"] = reason
    return [n for n in names if n not in skipped], skipped


def _renamed(target, name):
    return dataclasses.replace(target, name=name)


def build(names, services):
    """BenchTarget objects for names, from the running services."""
    cluster, d, pgb = services.cluster, services.l5pgd, services.pgbouncer
    makers = {
        "direct-tcp": lambda: direct_tcp_target(cluster),
        "direct-unix": lambda: direct_unix_target(cluster),
        "pgbouncer-tcp": lambda: Target("pgbouncer-tcp", pgb.host, pgb.port),
        "pgbouncer-unix": lambda: Target("pgbouncer-unix", str(pgb.socket_dir), pgb.port),
        "l5pgd-tcp": lambda: _renamed(tcp_target(d), "l5pgd-tcp"),
        "l5pgd-unix": lambda: _renamed(unix_target(d), "l5pgd-unix"),
        "l5pgd-shm": lambda: _renamed(shm_target(d), "l5pgd-shm"),
        "l5pgd-rdma": lambda: rdma_target(d),
    }
    return [BenchTarget(n, makers[n](), proxy_of(n)) for n in names]
