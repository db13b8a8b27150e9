"""Transport microbenchmarks: runs build/bin/l5pg-microbench, writes micro.csv and PNG plots,
and returns a Markdown section.

Ping-pong is run under three placements (pinned to two CPUs, both on one CPU, not pinned),
bandwidth only pinned to two CPUs. Usage from the repository root:

    python3 -m bench.l5bench.micro --build-dir build --out DIR [--quick]
"""
import argparse
import csv
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

BINARY = "l5pg-microbench"
TRANSPORT_ORDER = ("cacheline", "shm-spin", "shm", "shm-block", "shm-local", "unix", "tcp",
                   "pipe")
TRANSPORT_LABEL = {
    "cacheline": "cache line (floor)",
    "shm-spin": "SHM ring, pure spin",
    "shm": "SHM ring, spin/yield/doorbell",
    "shm-block": "SHM ring, always doorbell",
    "shm-local": "SHM ring code alone, one thread",
    "unix": "Unix socket pair",
    "tcp": "TCP loopback",
    "pipe": "pipe pair",
}
TRANSPORT_NOTE = {
    "cacheline": "one atomic uint64 per direction, each on its own cache line, busy-polled",
    "shm-spin": "l5pg_shm rings, both sides busy-poll with pause; no doorbell protocol",
    "shm": "l5pg_shm rings with the shim channel's wait: spin 50 µs, sched_yield 200 µs, "
           "then arm + poll() on the doorbell socket",
    "shm-block": "l5pg_shm rings with zero spin/yield budget: each wait sleeps in poll() until "
                 "a doorbell byte arrives",
    "shm-local": "both ring ends and the echo in one thread, so no cache line crosses cores: "
                 "what the ring code and the echo checks cost per round trip",
    "unix": "AF_UNIX SOCK_STREAM socketpair, blocking read/write",
    "tcp": "127.0.0.1, TCP_NODELAY, blocking read/write",
    "pipe": "two pipes, blocking read/write",
}
PLACEMENT_TITLE = {
    "cross": "pinned, two CPUs",
    "same": "pinned, one CPU",
    "default": "not pinned",
}


@dataclass
class Row:
    kind: str
    transport: str
    msg_bytes: int
    ring_bytes: int
    run: int
    value: Optional[float]
    unit: str
    placement: str


@dataclass
class Invocation:
    """One run of the binary under one placement."""
    name: str  # cross | same | default
    args: List[str]
    csv_path: Path
    log_path: Path
    returncode: Optional[int] = None
    header: Dict[str, str] = field(default_factory=dict)  # machine/placement/... lines
    rows: List[Row] = field(default_factory=list)


@dataclass
class Stat:
    median: float
    lo: float
    hi: float
    runs: int
    failed: int


def fmt_bytes(n: int) -> str:
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n >= 1 << 10 and n % (1 << 10) == 0:
        return f"{n >> 10} KiB"
    return f"{n} B"


def fmt_rate(r: float) -> str:
    if r >= 1e6:
        return f"{r / 1e6:.2f}M"
    if r >= 1e3:
        return f"{r / 1e3:.1f}k"
    return f"{r:.0f}"


def read_rows(path: Path) -> List[Row]:
    rows = []
    with path.open(newline="") as f:
        for r in csv.DictReader(f):
            rows.append(Row(r["kind"], r["transport"], int(r["msg_bytes"]), int(r["ring_bytes"]),
                            int(r["run"]), float(r["value"]) if r["value"] else None, r["unit"],
                            r["placement"]))
    return rows


def stat(rows: List[Row], kind: str, transport: str, msg: Optional[int] = None,
         ring: Optional[int] = None) -> Optional[Stat]:
    sel = [r for r in rows if r.kind == kind and r.transport == transport
           and (msg is None or r.msg_bytes == msg) and (ring is None or r.ring_bytes == ring)]
    ok = [r.value for r in sel if r.value is not None]
    if not ok:
        return None
    return Stat(statistics.median(ok), min(ok), max(ok), len(ok), len(sel) - len(ok))


def run_binary(binary: Path, inv: Invocation, quick: bool) -> None:
    cmd = [str(binary), "--csv", str(inv.csv_path)] + (["--quick"] if quick else []) + inv.args
    print(f"[micro] {' '.join(cmd)}", file=sys.stderr, flush=True)
    stdout_path = inv.log_path.with_suffix(".stdout")
    stderr_lines = []
    with stdout_path.open("w") as out:
        # Progress lines (stderr) are shown live and kept for the log.
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, text=True)
        for line in proc.stderr:
            sys.stderr.write("  " + line)
            stderr_lines.append(line)
        inv.returncode = proc.wait()
    stdout = stdout_path.read_text()
    stdout_path.unlink()
    inv.log_path.write_text(f"$ {' '.join(cmd)}\n{stdout}\n--- stderr ---\n{''.join(stderr_lines)}")
    for line in stdout.splitlines():
        m = re.match(r"^(machine|placement|SHM adaptive wait budget|l5pg-microbench): (.*)$", line)
        if m:
            inv.header[m.group(1)] = m.group(2)
    if not inv.csv_path.exists():
        raise RuntimeError(f"{BINARY} exited with {inv.returncode} and wrote no CSV; "
                           f"see {inv.log_path}\n{''.join(stderr_lines[-20:])}")
    inv.rows = read_rows(inv.csv_path)


def placement_runs(first: Invocation) -> Tuple[Optional[int], Optional[int]]:
    """CPUs the main run used, from its CSV placement tag 'pinned:A/B'."""
    tags = {r.placement for r in first.rows}
    for t in tags:
        m = re.match(r"pinned:(\d+)/(\d+)$", t)
        if m:
            return int(m.group(1)), int(m.group(2))
    return None, None


def write_merged_csv(invocations: List[Invocation], path: Path) -> None:
    with path.open("w", newline="") as out:
        w = csv.writer(out)
        w.writerow(["kind", "transport", "msg_bytes", "ring_bytes", "run", "value", "unit",
                    "placement"])
        for inv in invocations:
            for r in inv.rows:
                w.writerow([r.kind, r.transport, r.msg_bytes, r.ring_bytes, r.run,
                            "" if r.value is None else f"{r.value:.6g}", r.unit, r.placement])


# ------------------------------------------------------------------ plots

def plot_pingpong(invocations: List[Invocation], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    invs = [i for i in invocations if any(r.kind == "pingpong" for r in i.rows)]
    fig, axes = plt.subplots(1, len(invs), figsize=(6.5 * len(invs), 5), sharey=True,
                             squeeze=False)
    values = [r.value for i in invs for r in i.rows if r.kind == "pingpong" and r.value]
    for ax, inv in zip(axes[0], invs):
        transports = [t for t in TRANSPORT_ORDER if stat(inv.rows, "pingpong", t)]
        sizes = sorted({r.msg_bytes for r in inv.rows
                        if r.kind == "pingpong" and r.transport != "cacheline"})
        width = 0.8 / max(1, len(sizes))
        for k, size in enumerate(sizes):
            xs, ys, lo, hi = [], [], [], []
            for i, t in enumerate(transports):
                s = stat(inv.rows, "pingpong", t, None if t == "cacheline" else size)
                if s is None or (t == "cacheline" and k > 0):
                    continue
                x = i if t == "cacheline" else i - 0.4 + width * (k + 0.5)
                xs.append(x)
                ys.append(s.median)
                lo.append(s.median - s.lo)
                hi.append(s.hi - s.median)
            ax.bar(xs, ys, width if len(sizes) > 1 else 0.6, yerr=[lo, hi], capsize=3,
                   label=f"{size} B")
        ax.set_xticks(range(len(transports)))
        ax.set_xticklabels([TRANSPORT_LABEL[t] for t in transports], rotation=30, ha="right",
                           fontsize=8)
        ax.set_yscale("log")
        ax.set_title(f"{PLACEMENT_TITLE.get(inv.name, inv.name)} "
                     f"({inv.rows[0].placement if inv.rows else ''})", fontsize=10)
        ax.grid(axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=8, title="message (floor: 8 B)", title_fontsize=8)
    if values:  # log axis: set limits explicitly so that slow cells stay visible
        axes[0][0].set_ylim(min(values) / 2, max(values) * 2)
    axes[0][0].set_ylabel("round trips / s (log; median, bars min–max)")
    fig.suptitle("Ping-pong between two processes")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_bandwidth(rows: List[Row], chunks: List[int], rings: List[int], memcpy_gbs: float,
                   path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = []
    for c in chunks:
        line = []
        for r in rings:
            s = stat(rows, "bandwidth", "shm", c, r)
            line.append(float("nan") if s is None else s.median / memcpy_gbs)
        grid.append(line)
    fig, ax = plt.subplots(figsize=(1.3 * len(rings) + 2.5, 0.8 * len(chunks) + 2))
    finite = [v for line in grid for v in line if v == v]
    vmax = max([1.0] + finite)
    im = ax.imshow(grid, cmap="viridis", vmin=0, vmax=vmax, aspect="auto")
    for i, c in enumerate(chunks):
        for j, r in enumerate(rings):
            v = grid[i][j]
            s = stat(rows, "bandwidth", "shm", c, r)
            text = "failed" if s is None else f"{s.median:.2f}\n{100 * v:.0f}%"
            ax.text(j, i, text, ha="center", va="center", fontsize=8,
                    color="white" if v != v or v < 0.6 * vmax else "black")
    ax.set_xticks(range(len(rings)))
    ax.set_xticklabels([fmt_bytes(r) for r in rings])
    ax.set_yticks(range(len(chunks)))
    ax.set_yticklabels([fmt_bytes(c) for c in chunks])
    ax.set_xlabel("ring size")
    ax.set_ylabel("chunk size")
    ax.set_title(f"SHM ring one-way bandwidth, GB/s and fraction of memcpy "
                 f"({memcpy_gbs:.2f} GB/s)", fontsize=10)
    fig.colorbar(im, ax=ax, label="fraction of single-thread memcpy")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ------------------------------------------------------------------ Markdown

def pingpong_table(inv: Invocation) -> List[str]:
    rows = inv.rows
    floor = stat(rows, "pingpong", "cacheline")
    out = ["| transport | message | round trips/s (median) | min – max | µs per round trip "
           "| × cache-line floor |",
           "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for t in TRANSPORT_ORDER:
        sizes = sorted({r.msg_bytes for r in rows if r.kind == "pingpong" and r.transport == t})
        for m in sizes:
            s = stat(rows, "pingpong", t, m)
            if s is None:
                out.append(f"| {TRANSPORT_LABEL[t]} | {m} B | failed | | | |")
                continue
            ratio = f"{floor.median / s.median:.1f}" if floor else "–"
            failed = f" ({s.failed} failed)" if s.failed else ""
            out.append(f"| {TRANSPORT_LABEL[t]} | {m} B | {fmt_rate(s.median)}{failed} | "
                       f"{fmt_rate(s.lo)} – {fmt_rate(s.hi)} | {1e6 / s.median:.2f} | {ratio} |")
    return out


def ring_cost_bound(inv: Invocation) -> List[str]:
    """An SHM round trip pays the line transfers (at best the floor's) plus the ring code
    (shm-local): floor time / (floor time + ring time) bounds its fraction of the floor."""
    floor = stat(inv.rows, "pingpong", "cacheline")
    out = []
    for m in sorted({r.msg_bytes for r in inv.rows
                     if r.kind == "pingpong" and r.transport == "shm-local"}):
        local = stat(inv.rows, "pingpong", "shm-local", m)
        shm = stat(inv.rows, "pingpong", "shm", m)
        if not (floor and local):
            continue
        floor_us, ring_us = 1e6 / floor.median, 1e6 / local.median
        reached = f"; measured: {100 * shm.median / floor.median:.0f}%" if shm else ""
        out.append(f"- {m} B: ring code {ring_us:.3f} µs per round trip without transfers; "
                   f"added to the floor's {floor_us:.3f} µs, an SHM round trip can reach at most "
                   f"{100 * floor_us / (floor_us + ring_us):.0f}% of the floor rate{reached}")
    return out


def placement_table(invocations: List[Invocation]) -> List[str]:
    invs = [i for i in invocations if any(r.kind == "pingpong" for r in i.rows)]
    head = "| transport | message | " + " | ".join(
        f"{PLACEMENT_TITLE.get(i.name, i.name)} (`{i.rows[0].placement}`)" for i in invs) + " |"
    out = [head, "| --- | ---: |" + " ---: |" * len(invs)]
    keys = []
    for t in TRANSPORT_ORDER:
        for m in sorted({r.msg_bytes for i in invs for r in i.rows
                         if r.kind == "pingpong" and r.transport == t}):
            keys.append((t, m))
    for t, m in keys:
        cells = []
        for inv in invs:
            s = stat(inv.rows, "pingpong", t, m)
            cells.append("–" if s is None else f"{fmt_rate(s.median)} ({1e6 / s.median:.2f} µs)")
        out.append(f"| {TRANSPORT_LABEL[t]} | {m} B | " + " | ".join(cells) + " |")
    return out


def bandwidth_table(rows: List[Row], chunks: List[int], rings: List[int],
                    dram_gbs: Optional[float], cached_gbs: Optional[float]) -> List[str]:
    out = ["| chunk \\ ring | " + " | ".join(fmt_bytes(r) for r in rings) + " |",
           "| ---: |" + " ---: |" * len(rings)]
    for c in chunks:
        cells = []
        for r in rings:
            s = stat(rows, "bandwidth", "shm", c, r)
            if s is None:
                cells.append("failed")
                continue
            shares = [f"{100 * s.median / ref:.0f}%" for ref in (dram_gbs, cached_gbs) if ref]
            cells.append(f"{s.median:.2f} GB/s" + (f" ({' / '.join(shares)})" if shares else ""))
        out.append(f"| {fmt_bytes(c)} | " + " | ".join(cells) + " |")
    return out


def failures(invocations: List[Invocation]) -> List[str]:
    out = []
    for inv in invocations:
        bad = [r for r in inv.rows if r.value is None]
        for r in bad:
            out.append(f"- {inv.name}: {r.kind} {r.transport} msg/chunk {fmt_bytes(r.msg_bytes)} "
                       f"ring {fmt_bytes(r.ring_bytes)} run {r.run} failed (see {inv.log_path.name})")
        if inv.returncode not in (0, None) and not bad:
            out.append(f"- {inv.name}: {BINARY} exited with {inv.returncode} "
                       f"(see {inv.log_path.name})")
    return out


def markdown(invocations: List[Invocation], plots: Dict[str, Optional[str]],
             plot_error: Optional[str]) -> str:
    main = invocations[0]
    rows = main.rows
    md = ["## Transport microbenchmarks (`l5pg-microbench`)", ""]
    md.append(f"Two processes (fork), {main.header.get('l5pg-microbench', '')}. "
              f"Machine: {main.header.get('machine', 'unknown')}.")
    md.append("")
    md.append("Placements:")
    for inv in invocations:
        md.append(f"- **{PLACEMENT_TITLE.get(inv.name, inv.name)}** "
                  f"(`{inv.rows[0].placement if inv.rows else '?'}`): "
                  f"{inv.header.get('placement', '?')}")
    md.append("")
    md.append("Each message carries its sequence number at both ends; the server checks it and "
              "echoes, the client compares the whole reply. Bandwidth chunks carry sequence "
              "stamps every 4 KiB and are compared in full for the first 64 and every 64th "
              "after; the reader's chunk count must equal the writer's.")
    md.append("")

    md.append(f"### Ping-pong round trips ({PLACEMENT_TITLE['cross']}, `{rows[0].placement}`)")
    md.append("")
    md.extend(pingpong_table(main))
    md.append("")
    md.append("× cache-line floor = round-trip time / round-trip time of the raw cache-line "
              "ping-pong. " + main.header.get("SHM adaptive wait budget", "") + ".")
    md.append("")
    for t in TRANSPORT_ORDER:
        md.append(f"- *{TRANSPORT_LABEL[t]}*: {TRANSPORT_NOTE[t]}")
    md.append("")
    bound = ring_cost_bound(main)
    if bound:
        md.append("Where an SHM round trip's time goes beyond the floor's:")
        md.append("")
        md.extend(bound)
        md.append("")
    if len([i for i in invocations if any(r.kind == 'pingpong' for r in i.rows)]) > 1:
        md.append("### Ping-pong by placement (median round trips/s and µs per round trip)")
        md.append("")
        md.extend(placement_table(invocations))
        md.append("")
    if plots.get("pingpong"):
        md.append(f"![ping-pong round trips]({plots['pingpong']})")
        md.append("")

    if any(r.kind == "bandwidth" for r in rows):
        chunks = sorted({r.msg_bytes for r in rows if r.kind == "bandwidth"})
        rings = sorted({r.ring_bytes for r in rows if r.kind == "bandwidth"})
        dram = stat(rows, "memcpy", "dram")
        cached = stat(rows, "memcpy", "cached")
        md.append(f"### SHM ring one-way bandwidth ({PLACEMENT_TITLE['cross']})")
        md.append("")
        if dram:
            dram_buf = next(r.msg_bytes for r in rows if r.kind == "memcpy" and r.transport == "dram")
            md.append(f"Reference: single-thread memcpy between two {fmt_bytes(dram_buf)} buffers "
                      f"(far beyond the last-level cache): **{dram.median:.2f} GB/s** "
                      f"(min {dram.lo:.2f}, max {dram.hi:.2f}).")
        if cached:
            cbuf = next(r.msg_bytes for r in rows if r.kind == "memcpy" and r.transport == "cached")
            md.append(f"In-cache memcpy ({fmt_bytes(cbuf)} buffers, one core): "
                      f"{cached.median:.2f} GB/s.")
        md.append("")
        md.append("Writer (parent) `RingWriter::write`s each chunk (several records when the "
                  "chunk exceeds the ring's max record payload, ring/2 − 4 bytes), reader (child) "
                  "`RingReader::read`s it into its own buffer; both wait like the channel. "
                  "Both buffers are one chunk, reused, so they stay in the cache, as a libpq "
                  "buffer does: the ring's own lines are what crosses between the cores. "
                  "Median GB/s (1 GB = 10⁹ B), in parentheses % of the out-of-cache memcpy / "
                  "% of the in-cache memcpy:")
        md.append("")
        md.extend(bandwidth_table(rows, chunks, rings, dram.median if dram else None,
                                  cached.median if cached else None))
        md.append("")
        if plots.get("bandwidth"):
            md.append(f"![SHM bandwidth heat map]({plots['bandwidth']})")
            md.append("")
    if plot_error:
        md.append(f"(Plots skipped: {plot_error})")
        md.append("")
    bad = failures(invocations)
    if bad:
        md.append("**Failures:**")
        md.extend(bad)
        md.append("")
    return "\n".join(md)


# ------------------------------------------------------------------ entry points

def run(build_dir: Path, out_dir: Path, quick: bool) -> str:
    """Runs the microbenchmarks; writes out_dir/micro.csv, micro_*.png, micro-*.log and
    returns the Markdown section."""
    build_dir = Path(build_dir)
    out_dir = Path(out_dir)
    binary = build_dir / "bin" / BINARY
    if not binary.exists():
        raise FileNotFoundError(f"{binary} not found; build it: cmake --build {build_dir} "
                                f"--target {BINARY}")
    out_dir.mkdir(parents=True, exist_ok=True)

    def inv(name, args):
        return Invocation(name, args, out_dir / f"micro-{name}.csv", out_dir / f"micro-{name}.log")

    main = inv("cross", [])
    run_binary(binary, main, quick)
    invocations = [main]
    parent_cpu, child_cpu = placement_runs(main)
    if parent_cpu is not None and parent_cpu != child_cpu:
        same = inv("same", ["--only", "pingpong", "--cpus", f"{parent_cpu},{parent_cpu}"])
        run_binary(binary, same, quick)
        invocations.append(same)
    default = inv("default", ["--only", "pingpong", "--no-pin"])
    run_binary(binary, default, quick)
    invocations.append(default)

    write_merged_csv(invocations, out_dir / "micro.csv")
    for i in invocations:
        i.csv_path.unlink(missing_ok=True)  # merged into micro.csv

    plots: Dict[str, Optional[str]] = {}
    plot_error = None
    try:
        plot_pingpong(invocations, out_dir / "micro_pingpong.png")
        plots["pingpong"] = "micro_pingpong.png"
        rows = main.rows
        dram = stat(rows, "memcpy", "dram")
        if dram and any(r.kind == "bandwidth" for r in rows):
            plot_bandwidth(rows, sorted({r.msg_bytes for r in rows if r.kind == "bandwidth"}),
                           sorted({r.ring_bytes for r in rows if r.kind == "bandwidth"}),
                           dram.median, out_dir / "micro_bandwidth.png")
            plots["bandwidth"] = "micro_bandwidth.png"
    except ImportError as e:
        plot_error = (f"matplotlib not available to {sys.executable} ({e}); "
                      "apt-get install -y python3-matplotlib and use /usr/bin/python3")
    md = markdown(invocations, plots, plot_error)
    (out_dir / "micro.md").write_text(md + "\n")
    return md


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", type=Path, default=Path("build"))
    ap.add_argument("--out", type=Path, required=True, help="output directory")
    ap.add_argument("--quick", action="store_true", help="fewer cells, 0.2 s runs")
    args = ap.parse_args(argv)
    print(run(args.build_dir, args.out, args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
