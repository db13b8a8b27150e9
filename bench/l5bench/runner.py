"""A whole benchmark run: start the services, warm up, check idle CPU, run the interleaved
matrix, stop everything (also on Ctrl-C, SIGTERM or error), then microbenchmarks, summary.md
and plots."""
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from tests.harness import paths

from . import cell as cell_mod
from . import idle, machine, placement, plots, results, schedule, summary, targets, workloads
from .services import Services

SETTLE_OVERHEAD_S = 0.5  # per-cell cost besides pgbench -T: process start, connect, settle


def log(msg):
    print(f"bench: {msg}", flush=True)


def _terminate(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


class Run:
    def __init__(self, opts):
        self.opts = opts
        self.out_dir = opts.out_dir
        self.workloads = workloads.get(opts.workloads)
        self.placements = placement.make_placements(opts.placements, opts.client_cpus,
                                                    opts.server_cpus)
        targets.validate(opts.targets)
        self.target_names, self.skipped = targets.runnable(opts.targets)
        self.work_dir = None
        self.services = None
        self.meta = self._initial_meta()
        self.failed_cells = 0
        self.keep_logs = opts.keep_workdir
        self.keep_cell = placement.in_quick_scope if opts.quick else None

    # -- metadata ----------------------------------------------------------
    def _initial_meta(self):
        o = self.opts
        return {
            "quick": o.quick, "interrupted": False, "facts": {},
            "method": {"command": " ".join(["bench/run_bench.py"] + o.argv), "duration": o.duration,
                       "runs": o.runs, "clients": o.clients, "scale": o.scale, "seed": o.seed,
                       "l5pgd_workers": o.l5pgd_workers, "cores": os.cpu_count()},
            "workloads": {w.name: w.description for w in self.workloads},
            "placements": {p.name: p.describe() for p in self.placements},
            "skipped_targets": self.skipped,
        }

    def cell_count(self):
        per_run = sum(1 for p in self.placements for w in self.workloads for c in self.opts.clients
                      for t in self.target_names
                      if self.keep_cell is None or self.keep_cell(p, w.name, c, t))
        return per_run * self.opts.runs

    def estimate_minutes(self):
        per_cell = self.opts.duration + SETTLE_OVERHEAD_S
        return (self.cell_count() * per_cell + self.opts.idle_seconds + 60) / 60

    # -- services ----------------------------------------------------------
    def start_services(self):
        self.work_dir = Path(tempfile.mkdtemp(prefix="l5bench-", dir="/tmp"))
        os.chmod(self.work_dir, 0o755)
        need_l5pgd = any(n.startswith("l5pgd-") for n in self.target_names) or self._idle_wanted()
        if need_l5pgd and not paths.L5PGD.exists():
            raise RuntimeError(f"l5pgd not found at {paths.L5PGD} (run `make build` or set "
                               "L5PG_BUILD_DIR)")
        if ("l5pgd-shm" in self.target_names or self._idle_wanted()) and not paths.SHIM.exists():
            raise RuntimeError(f"shim not found at {paths.SHIM} (run `make build`)")
        self.services = Services(self.work_dir, self.opts.scale, max(self.opts.clients),
                                 self.opts.l5pgd_workers, log=log)
        self.services.start(need_l5pgd=need_l5pgd,
                            need_pgbouncer=any(n.startswith("pgbouncer-") for n in self.target_names))
        self.meta["facts"] = machine.facts(self.services.cluster)

    def stop_services(self):
        if self.services is not None:
            code = self.services.stop()
            if code not in (0, None, -signal.SIGTERM):
                self.keep_logs = True
                log(f"l5pgd exited with status {code}; log: {self.services.l5pgd.log_path}")
        if self.work_dir is not None and not self.keep_logs:
            shutil.rmtree(self.work_dir, ignore_errors=True)
        elif self.work_dir is not None:
            log(f"kept {self.work_dir} (Postgres, PgBouncer and l5pgd logs)")

    # -- phases ------------------------------------------------------------
    def warm_up(self, bench_targets):
        by_name = {t.name: t for t in bench_targets}
        direct = by_name.get("direct-unix") or by_name.get("direct-tcp") or bench_targets[0]
        unpinned = placement.make_placements(["default"])[0]
        for w in self.workloads:
            c = min(max(self.opts.clients), os.cpu_count() or 1)
            log(f"warm-up: {w.name}, {c} clients, 2 s over {direct.name} (not recorded)")
            cell_mod.measure(w, direct, unpinned, c, 2, self.services, self.work_dir)
        # Each proxy opens its server connections for the most clients now, not inside the
        # first recorded cell of each larger client count (their start-up is Postgres CPU).
        most = max(self.opts.clients)
        for proxy in ("pgbouncer", "l5pgd"):
            through = next((t for t in bench_targets if t.proxy == proxy), None)
            if through is not None:
                log(f"warm-up: {self.workloads[0].name}, {most} clients, 1 s over {through.name} "
                    "(not recorded)")
                cell_mod.measure(self.workloads[0], through, unpinned, most, 1, self.services,
                                 self.work_dir)

    def _idle_wanted(self):
        return self.opts.idle_seconds > 0

    def measure_idle(self):
        if not self._idle_wanted():
            self.meta["idle"] = {"skipped": "disabled (--idle-seconds 0)"}
            return
        log(f"idle check: {self.opts.idle_sessions} idle SHM sessions, {self.opts.idle_seconds:g} s")
        r = idle.measure(self.services, self.opts.idle_sessions, self.opts.idle_seconds)
        self.meta["idle"] = dict(vars(r), blocks_when_idle=r.blocks_when_idle,
                                 limit_percent=idle.IDLE_LIMIT_PERCENT)
        log(f"idle: l5pgd {r.percent(r.l5pgd_cpu_s):.2f} %, clients {r.percent(r.clients_cpu_s):.2f} %"
            f" of one core")

    def run_matrix(self, bench_targets, csv_writer):
        cells = schedule.build(self.opts.runs, self.placements, self.workloads, self.opts.clients,
                               bench_targets, self.opts.seed, self.keep_cell)
        applied, t0 = None, time.monotonic()
        for seq, c in enumerate(cells, 1):
            if c.placement is not applied:
                placement.apply_server_placement(c.placement, self.services.server_roots())
                applied = c.placement
            res = cell_mod.measure(c.workload, c.target, c.placement, c.clients, self.opts.duration,
                                   self.services, self.work_dir)
            csv_writer.write(results.row(c, res, seq))
            self._report_cell(seq, len(cells), c, res, t0)
            if not res.ok:
                self.failed_cells += 1
                self.services.check_alive()

    def _report_cell(self, seq, total, c, res, t0):
        eta = (time.monotonic() - t0) / seq * (total - seq) / 60
        what = (f"{res.tps:,.0f} tps, {res.latency_ms:.3f} ms, {res.cpu_us_per_tx():,.0f} µs CPU/tx"
                if res.ok else res.status)
        log(f"[{seq}/{total}, ~{eta:.0f} min left] run {c.run} {c.placement.name} {c.workload.name} "
            f"c={c.clients} {c.target.name}: {what}")

    # -- outputs -----------------------------------------------------------
    def write_outputs(self):
        csv_path = self.out_dir / "results.csv"
        rows = results.read(csv_path) if csv_path.exists() else []
        self.meta["load_end"] = machine.load_average()
        try:
            self.meta["plots"] = plots.write_all(self.out_dir, rows) if rows else []
        except Exception as e:  # noqa: BLE001 - a missing matplotlib must not lose the summary
            self.meta["plots"], self.meta["plots_error"] = [], f"{type(e).__name__}: {e}"
            log(f"plots failed: {e}")
        (self.out_dir / "meta.json").write_text(json.dumps(self.meta, indent=2, default=str))
        (self.out_dir / "summary.md").write_text(summary.render(rows, self.meta))
        log(f"wrote {self.out_dir}/summary.md, results.csv and {len(self.meta['plots'])} plots")


def run_micro(out_dir, quick):
    """The transport microbenchmarks (bench/l5bench/micro.py), if present and built."""
    binary = paths.BUILD_DIR / "bin" / "l5pg-microbench"
    if not (Path(__file__).parent / "micro.py").exists():
        return "microbenchmarks skipped: bench/l5bench/micro.py is not there"
    if not binary.exists():
        return f"microbenchmarks skipped: {binary} is not built"
    log("microbenchmarks")
    try:
        from . import micro
        return micro.run(paths.BUILD_DIR, out_dir, quick)
    except Exception as e:  # noqa: BLE001 - report, keep the pgbench results
        log(f"microbenchmarks failed: {e}")
        return f"microbenchmarks failed: {type(e).__name__}: {e}"


def _check_tools():
    missing = [p for p in (paths.PGBENCH, "/usr/bin/taskset") if not Path(p).exists()]
    if missing:
        raise RuntimeError(f"missing {', '.join(map(str, missing))} (run `make deps`)")


def execute(run):
    """The measuring part; returns 'ok', 'interrupted' or an error message."""
    csv_writer = results.CsvWriter(run.out_dir / "results.csv")
    try:
        _check_tools()
        run.start_services()
        bench_targets = targets.build(run.target_names, run.services)
        run.warm_up(bench_targets)
        run.measure_idle()
        run.run_matrix(bench_targets, csv_writer)
        return "ok"
    except KeyboardInterrupt:
        run.meta["interrupted"] = True
        return "interrupted"
    except Exception as e:  # noqa: BLE001 - reported clearly, then everything is stopped
        run.keep_logs = True
        return f"{type(e).__name__}: {e}"
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # finish the cleanup undisturbed
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        csv_writer.close()
        run.stop_services()


def main(opts):
    if opts.render:
        return render_only(opts.render)
    try:
        run = Run(opts)
    except ValueError as e:
        print(f"bench: {e}", file=sys.stderr)
        return 2
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    log(f"{run.cell_count()} cells × {opts.duration} s; expect about {run.estimate_minutes():.0f} min. "
        f"Output: {opts.out_dir}")
    for name, reason in run.skipped.items():
        log(f"skipping target {name}: {reason}")
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)  # even if started with SIGINT ignored
    t0 = time.monotonic()
    outcome = execute(run)
    if outcome not in ("ok", "interrupted"):
        print(f"bench: error: {outcome}", file=sys.stderr, flush=True)
    run.meta["elapsed_s"] = time.monotonic() - t0
    if outcome == "ok" and opts.micro:
        run.meta["micro"] = run_micro(opts.out_dir, opts.quick)
    elif not opts.micro:
        run.meta["micro"] = "microbenchmarks skipped: --no-micro"
    else:
        run.meta["micro"] = f"microbenchmarks skipped: benchmark {outcome.split(':')[0]}"
    run.write_outputs()
    return _exit_status(outcome, run.failed_cells)


def _exit_status(outcome, failed_cells):
    if outcome == "interrupted":
        print("bench: interrupted; partial results kept", file=sys.stderr)
        return 130
    if outcome != "ok":
        return 1
    if failed_cells:
        print(f"bench: {failed_cells} cell(s) failed, see summary.md", file=sys.stderr)
        return 1
    return 0


def render_only(out_dir):
    """Rewrite summary.md and the plots of an earlier run from its results.csv and meta.json."""
    out_dir = Path(out_dir).resolve()
    meta = json.loads((out_dir / "meta.json").read_text())
    rows = results.read(out_dir / "results.csv")
    meta["plots"] = plots.write_all(out_dir, rows) if rows else []
    (out_dir / "summary.md").write_text(summary.render(rows, meta))
    log(f"rewrote {out_dir}/summary.md and {len(meta['plots'])} plots")
    return 0
