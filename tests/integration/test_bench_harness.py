"""The `make bench` harness on a tiny matrix: it runs end to end and writes what it promises.

Not a benchmark: one workload, three targets, one client, 1 s per cell, one repetition, all
three placements, into a temporary directory. The harness starts its own cluster, PgBouncer and l5pgd.
"""
import csv
import os
import subprocess
import sys

import pytest

from tests.harness import paths
from tests.harness.client import psql, shm_target, unix_target

# Runs pgbench at full speed on every CPU: beside it, other tests' timeouts would measure
# its load (tests/integration/conftest.py: serial).
pytestmark = pytest.mark.serial

REPO = paths.REPO
COLUMNS = ["workload", "target", "placement", "clients", "run", "tps", "latency_ms", "cpu_us_per_tx"]
TARGETS = ["direct-unix", "pgbouncer-unix", "l5pgd-shm"]
PLACEMENTS = ["default", "pinned", "shared"]


def run_bench(out_dir, *extra):
    cmd = [sys.executable, str(REPO / "bench" / "run_bench.py"), "--out", str(out_dir),
           "--workloads", "point-read", "--targets", ",".join(TARGETS), "--clients", "1",
           "--duration", "1", "--runs", "1", "--scale", "1", "--idle-seconds", "1",
           "--idle-sessions", "2", "--no-micro", "--seed", "1", *extra]
    env = dict(os.environ, L5PG_BUILD_DIR=str(paths.BUILD_DIR))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, env=env)


def _l5bench_importable():
    if str(REPO / "bench") not in sys.path:
        sys.path.insert(0, str(REPO / "bench"))


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory, l5pgd_binary, shim):
    if not os.path.exists("/usr/sbin/pgbouncer"):
        pytest.fail("/usr/sbin/pgbouncer missing (make deps)", pytrace=False)
    out = tmp_path_factory.mktemp("bench") / "out"
    r = run_bench(out)
    assert r.returncode == 0, f"run_bench.py exited {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return out


@pytest.mark.timeout(120)
def test_csv_has_the_columns_and_one_row_per_cell(bench_run):
    with open(bench_run / "results.csv", newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames[:len(COLUMNS)] == COLUMNS
        rows = list(reader)
    cells = {(r["target"], r["placement"]) for r in rows}
    assert cells == {(t, p) for t in TARGETS for p in PLACEMENTS}
    assert len(rows) == len(TARGETS) * len(PLACEMENTS)
    for r in rows:
        assert r["status"] == "ok", r
        assert (r["workload"], r["clients"], r["run"]) == ("point-read", "1", "1")
        assert float(r["tps"]) > 0 and float(r["latency_ms"]) > 0
        assert float(r["cpu_us_per_tx"]) > 0
        proxy = float(r["cpu_us_proxy"])
        assert proxy == 0 if r["target"] == "direct-unix" else proxy >= 0


@pytest.mark.timeout(120)
def test_summary_plots_and_idle_check(bench_run):
    summary = (bench_run / "summary.md").read_text()
    for needle in ("## Machine", "PgBouncer 1.", "## point-read, placement pinned",
                   "## point-read, placement shared", "one CPU for everything", "l5pgd-shm",
                   "vs direct-unix", "## Idle CPU", "taskset -c"):
        assert needle in summary, needle
    assert "microbenchmarks skipped" in summary
    pngs = list(bench_run.glob("*.png"))
    assert pngs and all(p.stat().st_size > 1000 for p in pngs)


def test_quick_matrix_runs_shared_only_where_it_sets_the_yardstick():
    _l5bench_importable()
    from l5bench import placement, schedule, targets, workloads

    places = placement.make_placements(list(placement.PLACEMENT_NAMES))
    assert [p.name for p in places] == ["default", "pinned", "shared"]
    shared = places[2]
    assert shared.client_cpus == shared.server_cpus and len(shared.client_cpus) == 1
    fake = [targets.BenchTarget(n, None, None) for n in ("direct-unix", "l5pgd-shm", "pgbouncer-unix")]
    cells = schedule.build(1, places, workloads.get(["point-read", "tpcb-like"]), [1, 8], fake, 1,
                           placement.in_quick_scope)
    in_shared = {(c.workload.name, c.clients, c.target.name) for c in cells if c.placement is shared}
    assert in_shared == {("point-read", 1, "direct-unix"), ("point-read", 1, "l5pgd-shm")}
    assert len(cells) == 2 * 2 * 2 * 3 + 2


def test_placements_are_interleaved_with_the_targets():
    """Ratios across placements (SHM vs the best direct configuration) must not compare blocks
    run minutes apart: within one workload and client count, placements alternate."""
    _l5bench_importable()
    from l5bench import placement, schedule, targets, workloads
    places = placement.make_placements(["default", "pinned"])
    fake = [targets.BenchTarget(n, None, None) for n in ("direct-unix", "l5pgd-shm", "pgbouncer-unix")]
    cells = schedule.build(3, places, workloads.get(["point-read"]), [1], fake, 1)
    assert len(cells) == 3 * 2 * 3
    changes = sum(a.placement is not b.placement for a, b in zip(cells, cells[1:]))
    assert changes > 3 * 2, [c.placement.name for c in cells]  # more than one block per run


def test_an_l5pgd_cell_that_stayed_on_the_socket_fails(l5pgd, shim):
    """A cell named l5pgd-shm whose clients were not upgraded measured l5pgd's Unix path."""
    _l5bench_importable()
    from l5bench import cell, targets
    stayed = cell.TransportCheck(l5pgd, targets.BenchTarget("l5pgd-shm", None, "l5pgd"))
    psql(unix_target(l5pgd), "SELECT 1")
    assert stayed.verdict(1).startswith("failed: 0 new l5pgd sessions over shm for 1 clients")
    upgraded = cell.TransportCheck(l5pgd, targets.BenchTarget("l5pgd-shm", None, "l5pgd"))
    psql(shm_target(l5pgd), "SELECT 1")
    assert upgraded.verdict(1) == "ok"
    assert upgraded.verdict(2).startswith("failed: 1 new l5pgd sessions")
    direct = cell.TransportCheck(l5pgd, targets.BenchTarget("direct-unix", None, None))
    assert direct.verdict(8) == "ok"
