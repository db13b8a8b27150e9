"""CPU placement of the client (pgbench) and the server side (Postgres, PgBouncer, l5pgd).

`default`: nothing is pinned, as a user would start things; the scheduler places everything.
`pinned`: the allowed CPUs are split in two halves. pgbench runs under `taskset -c <client
CPUs>`; every thread of every Postgres process (postmaster and all its children, and backends
forked later inherit it), of PgBouncer and of l5pgd (acceptor and workers) gets
sched_setaffinity(<server CPUs>). On 2 cores: pgbench on CPU 0, everything else on CPU 1.
`shared`: pgbench and every server-side thread on one CPU (the first server CPU). A hand-off
between the client and its backend is then a context switch instead of a cross-core wake-up,
which on small virtual machines makes it the fastest direct configuration for one client
(docs/performance.md, "Target 2"), so the yardstick must include it. Spinning cannot pay
there: the peer needs the very CPU the spinner holds.
"""
import os
from dataclasses import dataclass
from typing import Optional, Tuple

from . import cpuacct

PLACEMENT_NAMES = ("default", "pinned", "shared")


def cpu_list(cpus):
    return ",".join(str(c) for c in sorted(cpus))


def parse_cpu_list(text):
    """'0,2-3' -> (0, 2, 3)."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = part.split("-")
            out.extend(range(int(lo), int(hi) + 1))
        elif part:
            out.append(int(part))
    return tuple(sorted(set(out)))


@dataclass(frozen=True)
class Placement:
    name: str
    all_cpus: Tuple[int, ...]
    client_cpus: Optional[Tuple[int, ...]] = None  # None: not pinned
    server_cpus: Optional[Tuple[int, ...]] = None

    @property
    def pinned(self):
        return self.client_cpus is not None

    def client_prefix(self):
        """Command prefix that starts pgbench on the client CPUs."""
        return ["taskset", "-c", cpu_list(self.client_cpus)] if self.pinned else []

    def server_affinity(self):
        return set(self.server_cpus) if self.pinned else set(self.all_cpus)

    def describe(self):
        if not self.pinned:
            return ("default: nothing pinned; pgbench, Postgres, PgBouncer and l5pgd may run on any "
                    f"of CPUs {cpu_list(self.all_cpus)}")
        where = "shared, one CPU for everything" if self.name == "shared" else "pinned"
        return (f"{where}: pgbench under `taskset -c {cpu_list(self.client_cpus)}`; "
                f"sched_setaffinity({{{cpu_list(self.server_cpus)}}}) on every thread of the "
                "postmaster and all its children (new backends inherit it), of PgBouncer, "
                "and of l5pgd (acceptor and worker threads)")


def split_cpus(all_cpus):
    """Client half and server half of the CPUs; with one CPU both share it."""
    cpus = tuple(sorted(all_cpus))
    if len(cpus) == 1:
        return cpus, cpus
    half = len(cpus) // 2
    return cpus[:half], cpus[half:]


def make_placements(names, client_cpus=None, server_cpus=None):
    all_cpus = tuple(sorted(os.sched_getaffinity(0)))
    default_client, default_server = split_cpus(all_cpus)
    out = []
    for name in names:
        if name == "default":
            out.append(Placement("default", all_cpus))
        elif name == "pinned":
            out.append(Placement("pinned", all_cpus, tuple(client_cpus or default_client),
                                 tuple(server_cpus or default_server)))
        elif name == "shared":
            one = (tuple(server_cpus or default_server)[0],)
            out.append(Placement("shared", all_cpus, one, one))
        else:
            raise ValueError(f"unknown placement {name!r}; choose from {', '.join(PLACEMENT_NAMES)}")
    return out


def set_process_affinity(pid, cpus):
    """sched_setaffinity on every thread of pid (a process-level call only moves one thread)."""
    for tid in cpuacct.thread_ids(pid):
        try:
            os.sched_setaffinity(tid, cpus)
        except (ProcessLookupError, FileNotFoundError):
            pass


def set_tree_affinity(root, cpus):
    """Affinity for root and every live descendant, all threads."""
    stats = cpuacct.all_stats()
    for pid in [root] + cpuacct.descendants(root, stats):
        set_process_affinity(pid, cpus)


def apply_server_placement(placement, server_roots):
    """Pin (or unpin, for `default`) every server-side process tree."""
    cpus = placement.server_affinity()
    for root in server_roots:
        if root is not None:
            set_tree_affinity(root, cpus)


# The quick matrix runs `shared` only for the cells whose yardstick it decides (target 2: point
# reads, one client) and with l5pgd over SHM beside the direct targets.
QUICK_SHARED_SCOPE = {"workloads": ("point-read",), "clients": (1,),
                      "targets": ("direct-tcp", "direct-unix", "l5pgd-shm")}


# Beyond 1 and 8 clients the quick matrix shows the scaling shape of point reads over the
# targets issue #16 compares, in the default and pinned placements.
QUICK_CORE_CLIENTS = (1, 8)
QUICK_SCALING_SCOPE = {"workloads": ("point-read",),
                       "targets": ("direct-unix", "pgbouncer-unix", "l5pgd-unix", "l5pgd-shm")}


def _in(scope, workload, clients, target):
    return (workload in scope["workloads"] and target in scope["targets"]
            and clients in scope.get("clients", (clients,)))


def in_quick_scope(placement, workload, clients, target):
    if placement.name == "shared":
        return _in(QUICK_SHARED_SCOPE, workload, clients, target)
    return clients in QUICK_CORE_CLIENTS or _in(QUICK_SCALING_SCOPE, workload, clients, target)
