#!/usr/bin/env python3
"""make soak: 200 SHM sessions against l5pgd for SOAK_MINUTES (default 10).

  100 idle sessions (psycopg2, one query every 5 s each),
   50 sessions reconnecting in a loop (psycopg2: connect, query, close),
   50 pgbench clients (-S -M prepared, rate-limited so the 2 cores are not saturated).

Every 10 s it samples l5pgd's resident memory (private RssAnon, and RssShmem: the clients'
ring pages it touched, which grows until each ring has been written round once), open fds,
CPU time and l5pg_session_errors_total, and the clients' own error counts. It passes when
there were no errors and private memory and fd count are flat: the last minute's mean within
5 % of the second minute's. Results go to
bench/results/soak-<timestamp>/ (soak.csv, summary.md).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.harness import paths  # noqa: E402
from tests.harness.client import LineReader, PYTHON, popen, shm_target  # noqa: E402
from tests.harness.cluster import PgCluster  # noqa: E402
from tests.harness.l5pgd import L5pgd  # noqa: E402
from tests.harness.procstat import cpu_seconds, open_fds, status_kb  # noqa: E402

SAMPLE_EVERY = 10

# argv: mode (idle|reconnect), sessions, seconds. Prints one JSON line every 5 s:
# {"ok": n, "errors": n, "last_error": "..."}.
CLIENTS = r"""
import json, sys, threading, time, psycopg2
mode, sessions, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
end = time.monotonic() + seconds
stats = {"ok": 0, "errors": 0, "last_error": ""}
lock = threading.Lock()

def note(ok, err=""):
    with lock:
        if ok:
            stats["ok"] += 1
        else:
            stats["errors"] += 1
            stats["last_error"] = err

def idle(conns):
    while time.monotonic() < end:
        for c in conns:
            try:
                with c.cursor() as cur:
                    cur.execute("select 1")
                    cur.fetchone()
                note(True)
            except Exception as e:
                note(False, f"{type(e).__name__}: {e}".strip())
        time.sleep(5)

def reconnect():
    while time.monotonic() < end:
        try:
            c = psycopg2.connect("")
            with c.cursor() as cur:
                cur.execute("select count(*) from pgbench_branches")
                cur.fetchone()
            c.close()
            note(True)
        except Exception as e:
            note(False, f"{type(e).__name__}: {e}".strip())
            time.sleep(0.5)

if mode == "idle":
    conns = [psycopg2.connect("") for _ in range(sessions)]
    for c in conns:
        c.autocommit = True
    threads = [threading.Thread(target=idle, args=(conns,), daemon=True)]
else:
    threads = [threading.Thread(target=reconnect, daemon=True) for _ in range(sessions)]
for t in threads:
    t.start()
while time.monotonic() < end:
    time.sleep(5)
    with lock:
        print(json.dumps(stats), flush=True)
for t in threads:
    t.join(timeout=30)
with lock:
    print(json.dumps(stats), flush=True)
"""


def proc_sample(pid):
    """l5pgd's private resident memory (RssAnon: what a leak grows), the clients' ring pages
    it has touched (RssShmem: grows until every ring was written round once, then flat),
    open fds and CPU seconds."""
    return (status_kb(pid, "RssAnon"), status_kb(pid, "RssShmem"), open_fds(pid),
            cpu_seconds(pid))


def session_errors(d):
    return sum(v for (name, _), v in d.metrics().items() if name == "l5pg_session_errors_total")


def last_stats(reader):
    while reader.wait_for(lambda line: True, 0.01) is not None:
        pass  # take in what the clients printed since the last sample
    stats = {"ok": 0, "errors": 0, "last_error": ""}
    for line in reader.lines:
        try:
            stats = json.loads(line)
        except ValueError:
            pass
    return stats


def minute_mean(rows, key, minute):
    values = [r[key] for r in rows if minute * 60 <= r["t"] < (minute + 1) * 60]
    return statistics.mean(values) if values else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES", 10)))
    args = ap.parse_args()
    if args.minutes < 3:
        sys.exit("soak: at least 3 minutes (it compares the second minute with the last)")
    seconds = args.minutes * 60
    out_dir = REPO / "bench" / "results" / time.strftime("soak-%Y%m%d-%H%M%S")
    out_dir.mkdir(parents=True)
    work = Path(tempfile.mkdtemp(prefix="l5pg-soak-", dir="/tmp"))
    os.chmod(work, 0o755)
    cluster = PgCluster(work / "pg")
    cluster.init()
    cluster.add_settings("max_connections = 260\n")
    procs, d = [], None
    try:
        cluster.start()
        subprocess.run([paths.PGBENCH, "-i", "-s", "2", "-q"], env=cluster.env(), check=True,
                       capture_output=True, timeout=300)
        d = L5pgd(work / "l5pgd", cluster, workers=2,
                  extra_overrides=["logging.level=info", "limits.max_startup_per_peer=200"])
        d.start()
        target = shm_target(d)
        clients = [popen([PYTHON, "-c", CLIENTS, "idle", "100", str(seconds)], target, text=True),
                   popen([PYTHON, "-c", CLIENTS, "reconnect", "50", str(seconds)], target,
                         text=True)]
        readers = [LineReader(p.stdout) for p in clients]
        bench = popen([paths.PGBENCH, "-S", "-M", "prepared", "-c", "50", "-j", "2", "-R", "1000",
                       "-T", str(int(seconds)), "-n"], target, text=True)
        procs = clients + [bench]
        rows, start, last_cpu = [], time.monotonic(), None
        print(f"soak: {args.minutes:g} min, 200 SHM sessions, l5pgd pid {d.proc.pid}; "
              f"results in {out_dir}", flush=True)
        while time.monotonic() - start < seconds:
            time.sleep(SAMPLE_EVERY - (time.monotonic() - start) % SAMPLE_EVERY)
            anon_kb, shmem_kb, fds, cpu_s = proc_sample(d.proc.pid)
            stats = [last_stats(r) for r in readers]
            row = {"t": round(time.monotonic() - start), "rss_anon_kb": anon_kb,
                   "rss_shmem_kb": shmem_kb, "fds": fds,
                   "cpu_pct": 0.0 if last_cpu is None else
                   round(100 * (cpu_s - last_cpu) / SAMPLE_EVERY, 1),
                   "session_errors": session_errors(d),
                   "client_ok": sum(s["ok"] for s in stats),
                   "client_errors": sum(s["errors"] for s in stats),
                   "sessions_active": sum(v for (n, _), v in d.metrics().items()
                                          if n == "l5pg_sessions_active")}
            last_cpu = cpu_s
            rows.append(row)
            print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
        _, bench_err = bench.communicate(timeout=120)
        for p in clients:
            p.wait(timeout=120)
        pgbench_failed = bench.returncode != 0
        errors = rows[-1]["session_errors"] + rows[-1]["client_errors"] + int(pgbench_failed)
        verdicts = {}
        for key in ("rss_anon_kb", "fds"):
            second, last = minute_mean(rows, key, 1), minute_mean(rows, key, int(args.minutes) - 1)
            verdicts[key] = (second, last, abs(last - second) <= 0.05 * second)
        ok = errors == 0 and all(v[2] for v in verdicts.values())
        with open(out_dir / "soak.csv", "w") as f:
            f.write(",".join(rows[0]) + "\n")
            for r in rows:
                f.write(",".join(str(v) for v in r.values()) + "\n")
        cpu = [r["cpu_pct"] for r in rows[1:]]
        summary = [
            f"# soak {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
            f"{args.minutes:g} minutes, 200 SHM sessions (100 idle, 50 reconnecting, 50 pgbench "
            f"-S -R 1000), samples every {SAMPLE_EVERY} s.",
            "",
            "| measure | second minute | last minute | flat (within 5 %) |",
            "| --- | ---: | ---: | --- |",
        ] + [f"| {k} | {v[0]:.0f} | {v[1]:.0f} | {'yes' if v[2] else 'NO'} |"
             for k, v in verdicts.items()] + [
            "",
            f"l5pgd CPU: median {statistics.median(cpu):.1f} % of a core "
            f"(max {max(cpu):.1f} %); client queries/connections ok: {rows[-1]['client_ok']}; "
            f"client errors: {rows[-1]['client_errors']}; l5pg_session_errors_total: "
            f"{rows[-1]['session_errors']}; pgbench: {'failed' if pgbench_failed else 'ok'}.",
            "",
            f"**{'PASS' if ok else 'FAIL'}**",
        ]
        (out_dir / "summary.md").write_text("\n".join(summary) + "\n")
        print("\n".join(summary))
        if pgbench_failed:
            print(bench_err[-2000:])
        return 0 if ok else 1
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        if d is not None:
            d.stop()
        cluster.destroy()


if __name__ == "__main__":
    sys.exit(main())
