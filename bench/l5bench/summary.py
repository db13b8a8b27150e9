"""summary.md: machine facts, method, one table per workload × placement, idle CPU, failures."""
from . import stats as st
from .targets import TARGET_NAMES

REFERENCE = "direct-unix"
PROXY_REFERENCE = "pgbouncer-unix"


def _num(x, digits=0):
    return "–" if x is None else f"{x:,.{digits}f}"


def _ratio(x):
    return "–" if x is None else f"{x:.2f}×"


def _range(lo, hi, digits=0):
    return "–" if lo is None else f"{_num(lo, digits)}–{_num(hi, digits)}"


def _cpu(s):
    if s.cpu_median is None:
        return "–"
    return (f"{s.cpu_median:,.0f} ({s.cpu_client:,.0f} + {s.cpu_proxy:,.0f} + "
            f"{s.cpu_postgres:,.0f})")


def facts_section(meta):
    lines = ["## Machine", "", "| | |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in meta["facts"].items()]
    if meta.get("load_end"):
        lines.append(f"| load average at end | {meta['load_end']} |")
    return lines + [""]


def method_section(meta):
    m = meta["method"]
    lines = [
        "## Method", "",
        f"- Command: `{m['command']}`" + (" (quick matrix)" if meta.get("quick") else ""),
        f"- pgbench `-n -T {m['duration']} -c <clients> -j min(clients, {m['cores']})`, "
        f"scale {m['scale']}, clients {', '.join(map(str, m['clients']))}; "
        f"{m['runs']} repetitions of every cell; median and min–max over them.",
        "- Order: for each repetition, workload and client count, every (placement, target) "
        f"pair runs once in a freshly shuffled order (seed {m['seed']}), so targets and "
        "placements are interleaved.",
        f"- l5pgd: {m['l5pgd_workers']} workers, default spin/yield budgets, `pool.mode: "
        "session`; PgBouncer session mode; both pools large enough for every client, so both "
        "proxies keep their server connections from one cell to the next, and a warm-up opens "
        "as many through each proxy as the most clients need (direct cells start new "
        "backends, whose start-up and first page touches count in their Postgres CPU); "
        "Postgres: harness cluster "
        "(fsync off, synchronous_commit off) plus max_connections and shared_buffers "
        "(up to 1 GiB) for the benchmark.",
        "- CPU µs/tx = (client + proxy + Postgres) CPU time / transactions, over pgbench's whole "
        "lifetime (connection setup included): pgbench from wait4 rusage; l5pgd or PgBouncer "
        "from /proc/<pid>/stat utime+stime; Postgres = postmaster and all its children, exited "
        "ones included (postmaster's cutime+cstime). The table gives the repetition whose "
        "total is the median (the lower one of an even count), with that repetition's parts.",
        f"- Ratios compare median tps with `{REFERENCE}` in the same placement (and, for l5pgd "
        f"targets, with `{PROXY_REFERENCE}`); the yardstick is the best direct configuration "
        "(either direct target, any placement) for that workload and client count.",
        "", "Workloads:", ""]
    lines += [f"- `{k}`: {v}" for k, v in meta["workloads"].items()]
    lines += ["", "Placements:", ""]
    lines += [f"- {v}" for v in meta["placements"].values()]
    for name, reason in meta.get("skipped_targets", {}).items():
        lines.append(f"- Target `{name}` skipped: {reason}.")
    return lines + [""]


def cell_table(stats, rows, workload, placement):
    header = ("| target | clients | tps median | tps min–max | latency ms | "
              "CPU µs/tx (client + proxy + pg) | vs direct-unix | vs pgbouncer-unix | "
              "vs best direct |")
    lines = [header, "|" + " --- |" * 9]
    targets = [t for t in TARGET_NAMES if t in st.ordered_values(rows, "target")]
    for target in targets:
        for c in st.ordered_values(rows, "clients"):
            key = (workload, placement, target, c)
            s = stats.get(key)
            if s is None:
                continue
            best = st.best_direct(stats, workload, c)
            vs_best = s.tps_median / best[0] if best and s.tps_median is not None else None
            vs_pgb = st.ratio(stats, key, PROXY_REFERENCE) if target.startswith("l5pgd") else None
            runs = "" if s.runs_ok == s.runs_total else f" ({s.runs_ok}/{s.runs_total} ok)"
            lines.append(
                f"| {target} | {c} | {_num(s.tps_median)}{runs} | {_range(s.tps_min, s.tps_max)} | "
                f"{_num(s.latency_median, 3)} | {_cpu(s)} | {_ratio(st.ratio(stats, key, REFERENCE))} | "
                f"{_ratio(vs_pgb)} | {_ratio(vs_best)} |")
    return lines


def results_sections(rows):
    stats = st.aggregate(rows)
    lines = []
    for workload in st.ordered_values(rows, "workload"):
        for placement in st.ordered_values(rows, "placement"):
            table = cell_table(stats, rows, workload, placement)
            if len(table) > 2:  # a header and rows: the quick matrix skips some pairs
                lines += [f"## {workload}, placement {placement}", ""] + table + [""]
    lines += yardstick_section(stats, rows)
    return lines


def yardstick_section(stats, rows):
    lines = ["## Yardstick: best direct configuration", "",
             "| workload | clients | tps | configuration |", "| --- | --- | --- | --- |"]
    for w in st.ordered_values(rows, "workload"):
        for c in st.ordered_values(rows, "clients"):
            best = st.best_direct(stats, w, c)
            if best:
                lines.append(f"| {w} | {c} | {_num(best[0])} | {best[1]} |")
    return lines + [""]


def idle_section(meta):
    idle = meta.get("idle")
    lines = ["## Idle CPU", ""]
    if not idle or "skipped" in idle:
        return lines + [f"Not measured: {(idle or {}).get('skipped', 'no result')}.", ""]
    secs = idle["seconds"]

    def pct(k):
        return f"{idle[k]:.3f} s ({100 * idle[k] / secs:.2f} % of one core)"
    verdict = ("yes" if idle["blocks_when_idle"] else "NO") + f" (limit {idle['limit_percent']} %)"
    return lines + [
        f"{idle['sessions']} SHM sessions through the shim (one psycopg2 process, one query each, "
        f"then idle; {idle['shm_sessions_active']:.0f} active SHM sessions in l5pgd's metrics), "
        f"measured over {secs:.1f} s:", "",
        f"- l5pgd: {pct('l5pgd_cpu_s')}",
        f"- client process: {pct('clients_cpu_s')}",
        f"- Postgres (all processes): {pct('postgres_cpu_s')}",
        f"- l5pgd + client below the limit, i.e. spinning falls back to blocking: {verdict}", ""]


def failures_section(rows):
    failed = [r for r in rows if r["status"] != "ok"]
    if not failed:
        return []
    lines = [f"## Failed cells ({len(failed)})", ""]
    lines += [f"- run {r['run']} {r['workload']} {r['placement']} c={r['clients']} {r['target']}: "
              f"{r['status']}" for r in failed]
    return lines + [""]


def plots_section(meta):
    plots = meta.get("plots") or []
    if not plots:
        return ["## Plots", "", f"No plots: {meta.get('plots_error', 'none written')}.", ""]
    return ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]


def render(rows, meta):
    title = "# l5pg pgbench benchmark" + (" (interrupted, partial)" if meta.get("interrupted") else "")
    lines = [title, ""]
    if meta.get("elapsed_s") is not None:
        lines += [f"{len(rows)} cells in {meta['elapsed_s'] / 60:.1f} min. Results: `results.csv` "
                  "(one row per cell and repetition).", ""]
    lines += facts_section(meta) + method_section(meta)
    lines += results_sections(rows) + idle_section(meta) + failures_section(rows)
    lines += plots_section(meta)
    lines += ["## Microbenchmarks", "", meta.get("micro") or "microbenchmarks skipped: not run", ""]
    return "\n".join(lines)
