#!/usr/bin/python3
"""`make bench`: pgbench over direct TCP/Unix socket, PgBouncer TCP/Unix socket and l5pgd
TCP/Unix socket/SHM (and RDMA when a device exists), at 1–64 clients, in three CPU placements,
each cell repeated and the targets interleaved; CPU time per transaction of every process
involved; results.csv, summary.md and PNG plots in bench/results/<timestamp>/.

Starts its own throwaway PostgreSQL 15 cluster, PgBouncer and l5pgd and stops them on exit,
Ctrl-C or error. `--quick` runs the reduced matrix (about 14 minutes on 2 cores). See --help.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from l5bench import options, runner  # noqa: E402

if __name__ == "__main__":
    sys.exit(runner.main(options.parse(sys.argv[1:])))
