"""Over SHM a request and its answer travel through the rings, so a libpq client's round
trips need no socket system calls at all: libpq's recv() on an empty ring answers EAGAIN
without asking the kernel, and its poll() spins on the ring. Counted with strace, which
sees every system call whoever makes it (libpq, the shim, libc).
"""
import re

import pytest

from tests.harness.client import PGBENCH, parse_pgbench, run, shm_target

# Relies on no answer outlasting a 50 ms spin: another test's load beside it can
# (tests/integration/conftest.py: serial).
pytestmark = pytest.mark.serial

T = 2000  # transactions
SOCKET_CALLS = ("recvfrom", "recvmsg", "recvmmsg", "sendto", "sendmsg", "sendmmsg")


def strace_counts(path):
    """{syscall: calls} from an `strace -c` summary."""
    counts = {}
    for line in path.read_text().splitlines():
        # % time  seconds  usecs/call  calls  [errors]  syscall
        m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$", line)
        if m:
            counts[m.group(2)] = int(m.group(1))
    return counts


@pytest.mark.timeout(120)
def test_round_trips_make_no_socket_calls(l5pgd, pgbench_db, shim, tmp_path):
    summary = tmp_path / "strace.txt"
    cmd = ["strace", "-f", "--seccomp-bpf", "-qq", "-c", "-o", summary,
           "-e", "trace=" + ",".join(SOCKET_CALLS),
           PGBENCH, "-S", "-M", "prepared", "-c", 1, "-t", T, "-n"]
    # Spinning for up to 50 ms: no answer outlasts the budget and ends in a blocking poll
    # (whose doorbell byte would be read with a recvfrom), however slow the machine, and
    # however crowded its CPUs (L5PG_BLOCK_WHEN_CROWDED=0).
    blocks_before = l5pgd.metric("l5pg_worker_blocks_total")
    r = run(cmd, shm_target(l5pgd), timeout=100,
            env={"L5PG_SPIN_US": "50000", "L5PG_BLOCK_WHEN_CROWDED": "0"})
    result = parse_pgbench(r.stdout, r.stderr, r.returncode)
    assert result.processed == T and result.failed == 0, r.stdout
    worker_blocks = l5pgd.metric("l5pg_worker_blocks_total") - blocks_before
    counts = strace_counts(summary)
    # Connecting and the SHM upgrade handshake take a few dozen; T round trips must add
    # no reads (an earlier shim read the socket once per answer: >= T recvfrom calls).
    reads = sum(counts.get(c, 0) for c in SOCKET_CALLS if c.startswith("recv"))
    assert reads < 100, counts
    # A request's doorbell is owed only to a worker that went to sleep (its flag armed): on
    # a quiet machine that is rare, on a loaded one (other processes took the worker's CPU)
    # it happens, but never more often than the worker blocked.
    doorbells = counts.get("sendto", 0)
    assert doorbells < 100 or doorbells <= worker_blocks + 50, (counts, worker_blocks)
