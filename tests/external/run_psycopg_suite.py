#!/usr/bin/env python3
"""Run psycopg 3's connection/cursor tests directly against a throwaway Postgres and then
through l5pgd with the LD_PRELOAD shim (SHM), and print the figures issue 20 asks for.

  tests/external/run_psycopg_suite.py --psycopg-src DIR --build build

DIR holds psycopg's tests/ (its git repository: not packaged by PyPI or Debian, so not run
by `make test`); --python an interpreter with that psycopg's version, pytest and
pytest-asyncio installed (a venv). Passes when l5pgd counted no SHM session error, the
connections went over SHM, and no test fails through the shim that passes directly.

Run as root (the l5pg harness starts Postgres as `postgres`; its auth overrides map the
OS user root to role postgres). Uses the repository's tests/harness (repo = --build/..)."""
import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

DEFAULT_TESTS = ["tests/test_connection.py", "tests/test_cursor.py", "tests/test_connection_async.py"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--psycopg-src", required=True, type=Path, help="dir holding psycopg's tests/")
    p.add_argument("--build", required=True, type=Path, help="l5pg build dir (bin/l5pgd, lib/libl5pg.so)")
    p.add_argument("--repo", type=Path, help="l5pg checkout for tests/harness (default: BUILD/..)")
    p.add_argument("--python", default="python3", help="interpreter with psycopg+pytest")
    p.add_argument("--tests", nargs="+", default=DEFAULT_TESTS, help="test files, relative to --psycopg-src")
    p.add_argument("--pytest-args", default="", help="extra pytest arguments (one string)")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    return p.parse_args()


def run_pytest(args, dsn, junit, preload=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PG", "L5PG_", "PSYCOPG_")) and k != "LD_PRELOAD"}
    env["PSYCOPG_TEST_DSN"] = dsn
    if preload:
        env["LD_PRELOAD"] = str(preload)
    cmd = [args.python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfE",
           f"--junitxml={junit}", *args.pytest_args.split(), *args.tests]
    r = subprocess.run(cmd, cwd=args.psycopg_src, env=env, capture_output=True, text=True, timeout=1800)
    return r, outcomes(junit)


def outcomes(junit):
    """junit xml -> {test id: (outcome, message)}."""
    res = {}
    if not Path(junit).exists():
        return res
    for tc in ET.parse(junit).getroot().iter("testcase"):
        tid = f"{tc.get('classname')}::{tc.get('name')}"
        kind, msg = "passed", ""
        for child in tc:
            if child.tag in ("failure", "error", "skipped"):
                kind = {"failure": "failed"}.get(child.tag, child.tag)
                msg = (child.get("message") or "").splitlines()[0][:200] if child.get("message") else ""
                break
        res[tid] = (kind, msg)
    return res


def counts(res):
    c = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    for kind, _ in res.values():
        c[kind] += 1
    return c


def main():
    args = parse_args()
    args.psycopg_src, args.build = args.psycopg_src.resolve(), args.build.resolve()
    repo = (args.repo or args.build.parent).resolve()
    os.environ["L5PG_BUILD_DIR"] = str(args.build)
    sys.path.insert(0, str(repo))
    from tests.harness.cluster import PgCluster
    from tests.harness.l5pgd import L5pgd

    shim = args.build / "lib" / "libl5pg.so"
    work = Path(tempfile.mkdtemp(prefix="psycopg-l5pg-", dir="/tmp"))
    os.chmod(work, 0o755)
    cluster = PgCluster(work / "pg")
    daemon = None
    try:
        cluster.start()
        daemon = L5pgd(work / "l5pgd", cluster, workers=2, binary=args.build / "bin" / "l5pgd")
        daemon.start()
        l5_dsn = f"host={daemon.socket_dir} port={daemon.port} user=postgres dbname=postgres"
        pglog = lambda: cluster.log_path.read_text(errors="replace")  # noqa: E731
        eof = lambda text: [ln for ln in text.splitlines() if "unexpected EOF" in ln]  # noqa: E731

        # One shimmed connection with L5PG_DEBUG=1: the shim says whether it upgraded.
        probe = subprocess.run(
            [args.python, "-c", f"import psycopg; psycopg.connect({l5_dsn!r}).close()"],
            env={**os.environ, "LD_PRELOAD": str(shim), "L5PG_DEBUG": "1"},
            capture_output=True, text=True, timeout=60)
        upgraded = [ln for ln in probe.stderr.splitlines() if "upgraded to" in ln]

        log0 = len(pglog())
        direct, d_res = run_pytest(args, cluster.dsn(), work / "direct.xml")
        log1 = len(pglog())
        m = lambda n: daemon.metric(n, transport="shm")  # noqa: E731
        s0, e0 = m("l5pg_sessions_total"), m("l5pg_session_errors_total")
        shimmed, s_res = run_pytest(args, l5_dsn, work / "shim.xml", preload=shim)
        s1, e1 = m("l5pg_sessions_total"), m("l5pg_session_errors_total")
        text = pglog()

        print(f"tests: {' '.join(args.tests)} (psycopg src {args.psycopg_src})")
        print(f"probe (L5PG_DEBUG=1): {upgraded[0] if upgraded else 'NO UPGRADE: ' + probe.stderr[-300:]}")
        for name, r, res in (("direct", direct, d_res), ("shim  ", shimmed, s_res)):
            c = counts(res)
            print(f"{name}: passed {c['passed']} failed {c['failed']} errors {c['error']} "
                  f"skipped {c['skipped']} (pytest exit {r.returncode})")
        print(f"l5pg_session_errors_total{{transport=\"shm\"}}: before {e0:g} after {e1:g}")
        print(f"l5pg_sessions_total{{transport=\"shm\"}}: before {s0:g} after {s1:g} (delta {s1 - s0:g})")
        print(f"postgres 'unexpected EOF' lines: direct run {len(eof(text[log0:log1]))}, "
              f"shim run {len(eof(text[log1:]))}")
        for ln in eof(text[log0:])[:10]:
            print("  ", ln)
        worse = sorted(t for t, (k, _) in s_res.items()
                       if k in ("failed", "error") and d_res.get(t, ("?",))[0] == "passed")
        print(f"fail through the shim but pass directly: {len(worse)}")
        for t in worse:
            print(f"   {t}: {s_res[t][1]}")
        both = sorted(t for t, (k, _) in s_res.items() if k == "failed" and d_res.get(t, ("?",))[0] == "failed")
        print(f"fail both ways (baseline, not l5pg): {len(both)}: " + ", ".join(t.replace("tests.", "") for t in both))
        errs = [ln for ln in daemon.log_text().splitlines() if "over shm): closing" in ln and "[debug]" not in ln]
        print(f"l5pgd non-debug SHM close lines: {len(errs)}")
        for ln in errs[:10]:
            print("  ", ln)
        for name, r in (("direct", direct), ("shim", shimmed)):
            if not (Path(work / f"{name}.xml").exists()):
                print(f"{name} pytest produced no report:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
        ok = e1 == e0 and s1 > s0 and not worse and bool(upgraded)
        print("RESULT:", "PASS" if ok else "FAIL")
        return 0 if ok else 1
    finally:
        if daemon is not None:
            daemon.stop()
        cluster.stop()
        if args.keep:
            print(f"work dir kept: {work}")
        else:
            subprocess.run(["rm", "-rf", str(work)])


if __name__ == "__main__":
    sys.exit(main())
