"""The connection targets a benchmark compares, and which proxy (if any) each goes through."""
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from tests.harness.client import (Target, direct_tcp_target, direct_unix_target, shm_target,
                                  tcp_target, unix_target)
from tests.harness.rdma import rdma_target

TARGET_NAMES = ("direct-tcp", "direct-unix", "pgbouncer-tcp", "pgbouncer-unix",
                "l5pgd-tcp", "l5pgd-unix", "l5pgd-shm", "l5pgd-rdma-verbs", "l5pgd-rdma-soft")
RDMA_TARGETS = {"l5pgd-rdma-verbs": "verbs", "l5pgd-rdma-soft": "soft"}
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


def rdma_device_kind():
    """The RDMA device l5pgd and the shim use in this run: verbs when the host has an RDMA
    device (a NIC or Soft-RoCE), else l5pg's user-space soft device. The soft device's
    numbers say nothing about RDMA speed; the target name says which one ran."""
    devices = sorted(p.name for p in RDMA_SYSFS.iterdir()) if RDMA_SYSFS.is_dir() else []
    return "verbs" if devices else "soft"


def rdma_skip_reason(name):
    """Why the RDMA target `name` cannot run here, or None if it can."""
    if RDMA_TARGETS[name] == rdma_device_kind():
        return None
    if name == "l5pgd-rdma-verbs":
        return f"no RDMA device ({RDMA_SYSFS} is empty or missing); l5pgd-rdma-soft runs instead"
    return "an RDMA device exists; l5pgd-rdma-verbs runs instead"


def runnable(names):
    """(names that can run here, {name: reason} for those skipped)."""
    skipped = {}
    for name in RDMA_TARGETS:
        reason = rdma_skip_reason(name) if name in names else None
        if reason:
            skipped[name] = reason
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
        "l5pgd-rdma-verbs": lambda: _renamed(rdma_target(d, "verbs"), "l5pgd-rdma-verbs"),
        "l5pgd-rdma-soft": lambda: _renamed(rdma_target(d, "soft"), "l5pgd-rdma-soft"),
    }
    return [BenchTarget(n, makers[n](), proxy_of(n)) for n in names]
