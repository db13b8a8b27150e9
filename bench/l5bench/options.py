"""Command-line options of bench/run_bench.py and the quick preset."""
import argparse
import datetime
import random
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

from . import REPO
from .placement import PLACEMENT_NAMES, parse_cpu_list
from .targets import TARGET_NAMES
from .workloads import WORKLOADS

FULL = {"clients": [1, 2, 4, 8, 16, 32, 64], "workloads": list(WORKLOADS), "duration": 5}
# Core: 8 targets × clients 1, 8 × 2 placements × 2 workloads × 3 runs = 192 cells, plus 9 cells
# of the `shared` placement (placement.QUICK_SHARED_SCOPE). Scaling shape (#16): point reads at
# clients 2, 4, 32, 64 over direct Unix, PgBouncer Unix, l5pgd Unix and l5pgd SHM, 2
# placements, 3 runs = 96 cells (placement.QUICK_SCALING_SCOPE). At 2 s each plus ~0.6 s of
# start/settle per cell that is ~13 min, plus setup, the idle check and the
# microbenchmarks: under 15 minutes on 2 cores. Scale 10: tpcb-like runs at 8 clients at most.
QUICK = {"clients": [1, 2, 4, 8, 32, 64], "workloads": ["point-read", "tpcb-like"], "duration": 2,
         "scale": 10}
RESULTS_DIR = REPO / "bench" / "results"


@dataclass
class Options:
    quick: bool
    duration: int
    runs: int
    clients: List[int]
    workloads: List[str]
    targets: List[str]
    placements: List[str]
    scale: int
    l5pgd_workers: int
    idle_seconds: float
    idle_sessions: int
    micro: bool
    out_dir: Path
    seed: int
    client_cpus: Optional[Tuple[int, ...]]
    server_cpus: Optional[Tuple[int, ...]]
    keep_workdir: bool
    render: Optional[Path]
    argv: List[str]


def _list(text):
    return [x.strip() for x in text.split(",") if x.strip()]


def _int_list(text):
    return [int(x) for x in _list(text)]


def parser():
    ap = argparse.ArgumentParser(
        prog="run_bench.py",
        description="pgbench benchmark: direct TCP/Unix, PgBouncer TCP/Unix, l5pgd TCP/Unix/SHM "
                    "(and RDMA when present), CPU placements default, pinned and shared, repeated "
                    "and interleaved.")
    ap.add_argument("--quick", action="store_true",
                    help="reduced matrix: clients 1,8 for point-read and tpcb-like; point-read "
                         "at 2,4,32,64 over the Unix and SHM targets; 2 s per cell")
    ap.add_argument("--duration", type=int, help="seconds per cell, pgbench -T (default 5; quick 2)")
    ap.add_argument("--runs", type=int, default=3, help="repetitions of every cell (default 3)")
    ap.add_argument("--clients", type=_int_list, help="client counts (default 1,2,4,8,16,32,64)")
    ap.add_argument("--workloads", type=_list, help=f"of {','.join(WORKLOADS)} (default all)")
    ap.add_argument("--targets", type=_list, default=list(TARGET_NAMES),
                    help=f"of {','.join(TARGET_NAMES)} (default all; l5pgd-rdma-verbs with an RDMA device, else l5pgd-rdma-soft)")
    ap.add_argument("--placements", type=_list, default=list(PLACEMENT_NAMES),
                    help="of default,pinned,shared (default all; the quick matrix runs shared "
                         "only for point reads at 1 client over direct-tcp, direct-unix, l5pgd-shm)")
    ap.add_argument("--scale", type=int, help="pgbench scale (default max(10, most clients))")
    ap.add_argument("--l5pgd-workers", type=int, default=2, help="l5pgd worker threads (default 2)")
    ap.add_argument("--idle-seconds", type=float, default=10.0,
                    help="idle SHM CPU check duration, 0 to skip (default 10)")
    ap.add_argument("--idle-sessions", type=int, default=10, help="idle SHM sessions (default 10)")
    ap.add_argument("--no-micro", action="store_true", help="skip the transport microbenchmarks")
    ap.add_argument("--out", type=Path, help="output directory (default bench/results/<timestamp>)")
    ap.add_argument("--seed", type=int, help="seed of the target order (default: random)")
    ap.add_argument("--client-cpus", type=parse_cpu_list,
                    help="CPUs for pgbench when pinned (default: first half of the CPUs)")
    ap.add_argument("--server-cpus", type=parse_cpu_list,
                    help="CPUs for Postgres, PgBouncer, l5pgd when pinned (default: second half)")
    ap.add_argument("--keep-workdir", action="store_true",
                    help="keep the throwaway cluster directory (logs) after the run")
    ap.add_argument("--render", type=Path, metavar="DIR",
                    help="only rewrite summary.md and plots of an earlier run in DIR")
    return ap


def default_out_dir():
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return RESULTS_DIR / stamp


def parse(argv):
    a = parser().parse_args(argv)
    preset = QUICK if a.quick else FULL
    clients = a.clients or preset["clients"]
    if min(clients) < 1 or a.runs < 1 or (a.duration is not None and a.duration < 1):
        parser().error("clients, runs and duration must be at least 1")
    return Options(
        quick=a.quick, duration=a.duration or preset["duration"], runs=a.runs,
        clients=sorted(set(clients)), workloads=a.workloads or preset["workloads"],
        targets=a.targets, placements=a.placements,
        scale=a.scale or preset.get("scale") or max(10, max(clients)),
        l5pgd_workers=a.l5pgd_workers, idle_seconds=a.idle_seconds, idle_sessions=a.idle_sessions,
        micro=not a.no_micro, out_dir=(a.out or default_out_dir()).resolve(),
        seed=a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 31),
        client_cpus=a.client_cpus, server_cpus=a.server_cpus, keep_workdir=a.keep_workdir,
        render=a.render, argv=list(argv))
