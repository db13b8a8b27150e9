"""l5bench: the pgbench benchmark harness behind `make bench` (entry point: bench/run_bench.py).

One concern per module: workloads, targets, placement, CPU accounting, services (Postgres,
PgBouncer, l5pgd), one measured cell, the schedule, results CSV, summary, plots, idle CPU,
machine facts, and the runner that ties them together.
"""
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # for tests.harness (used read-only)
