#!/usr/bin/python3
"""l5pg demo: pgbench select-only over direct TCP/Unix and l5pgd TCP/Unix/SHM.

Starts a throwaway PostgreSQL 15 cluster under <repo>/.run/ (wiped first), initialises pgbench
data, starts l5pgd in front of it, runs `pgbench -S -M prepared -c 1 -T 5` over each path and
prints a table, then l5pgd's session counts per transport. Everything it started is stopped on
exit, Ctrl-C or error. Exit status is non-zero if any target failed or no SHM session was seen.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.harness import paths  # noqa: E402
from tests.harness.client import (direct_tcp_target, direct_unix_target, pgbench, shm_target,  # noqa: E402
                                  tcp_target, unix_target)
from tests.harness.cluster import PgCluster  # noqa: E402
from tests.harness.l5pgd import L5pgd  # noqa: E402


def _terminate(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-T", "--duration", type=int, default=5, help="seconds per target (default 5)")
    ap.add_argument("-c", "--clients", type=int, default=1, help="pgbench clients (default 1)")
    ap.add_argument("-s", "--scale", type=int, default=10, help="pgbench scale (default 10)")
    ap.add_argument("--workers", type=int, default=2, help="l5pgd workers (default 2)")
    args = ap.parse_args()

    for p, what in ((paths.L5PGD, "l5pgd"), (paths.SHIM, "shim")):
        if not p.exists():
            print(f"demo: {what} not found at {p} (run `make build` or set L5PG_BUILD_DIR)",
                  file=sys.stderr)
            return 1

    signal.signal(signal.SIGTERM, _terminate)
    run_dir = REPO / ".run"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    os.chmod(run_dir, 0o755)

    cluster = PgCluster(run_dir / "pg")
    daemon = None
    failed = []
    try:
        print(f"demo: starting PostgreSQL 15 in {cluster.base_dir} (port {cluster.port})", flush=True)
        cluster.start()
        print(f"demo: pgbench -i -s {args.scale}", flush=True)
        r = subprocess.run([paths.PGBENCH, "-i", "-q", "-s", str(args.scale)], env=cluster.env(),
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            print(f"demo: pgbench -i failed:\n{r.stderr}", file=sys.stderr)
            return 1
        daemon = L5pgd(run_dir / "l5pgd", cluster, workers=args.workers)
        daemon.start()  # may move to other ports if the chosen ones were taken meanwhile
        print(f"demo: started l5pgd (port {daemon.port}, metrics 127.0.0.1:{daemon.metrics_port})",
              flush=True)

        targets = [
            ("direct-tcp", direct_tcp_target(cluster)),
            ("direct-unix", direct_unix_target(cluster)),
            ("l5pgd-tcp", tcp_target(daemon)),
            ("l5pgd-unix", unix_target(daemon)),
            ("l5pgd-shm", shm_target(daemon)),
        ]
        rows = []
        for name, t in targets:
            print(f"demo: {name} ...", flush=True)
            try:
                res = pgbench(t, ["-n", "-S", "-M", "prepared", "-c", args.clients, "-j",
                                  min(args.clients, os.cpu_count() or 1), "-T", args.duration],
                              timeout=args.duration + 120, check=False)
                ok = res.returncode == 0 and res.failed == 0 and res.processed > 0
                if not ok:
                    print(f"demo: {name} failed (exit {res.returncode}, failed {res.failed})\n"
                          f"{res.stderr[-2000:]}", file=sys.stderr)
                rows.append((name, args.clients, res.tps, res.latency_ms, ok))
            except Exception as e:  # a failing target must not hide the others
                print(f"demo: {name} failed: {e}", file=sys.stderr)
                rows.append((name, args.clients, 0.0, 0.0, False))
            if not rows[-1][4]:
                failed.append(name)

        print()
        print(f"{'target':<16}{'clients':>8}{'tps':>12}{'mean latency ms':>18}")
        for name, c, tps, lat, ok in rows:
            mark = "" if ok else "   FAILED"
            print(f"{name:<16}{c:>8}{tps:>12.0f}{lat:>18.3f}{mark}")
        print()

        sessions = {}
        try:
            m = daemon.metrics()
            for (mname, labels), v in m.items():
                if mname == "l5pg_sessions_total":
                    sessions[dict(labels).get("transport", "?")] = v
        except Exception as e:
            print(f"demo: could not read metrics: {e}", file=sys.stderr)
            failed.append("metrics")
        print("l5pgd sessions by transport (l5pg_sessions_total):")
        for tr in ("tcp", "unix", "shm"):
            print(f"  {tr:<6}{sessions.get(tr, 0):>8.0f}")
        if sessions.get("shm", 0) <= 0:
            print("demo: no shared-memory session was recorded", file=sys.stderr)
            failed.append("shm-sessions")
    except KeyboardInterrupt:
        print("\ndemo: interrupted", file=sys.stderr)
        failed.append("interrupted")
    except Exception as e:
        print(f"demo: error: {e}", file=sys.stderr)
        failed.append("error")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # finish the cleanup
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if daemon is not None:
            code = daemon.stop()
            if code not in (0, None, -signal.SIGTERM):
                print(f"demo: l5pgd exited with status {code}; log: {daemon.log_path}", file=sys.stderr)
        cluster.stop()
    if failed:
        print(f"demo: FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    print("demo: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
