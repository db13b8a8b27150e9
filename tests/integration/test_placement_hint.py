"""Placement hints (transport/wait/cpu_hint.hpp): a client and an l5pgd worker confined to the
same single CPU block for each other instead of spinning, since the one that waits holds the
CPU the other needs. l5pgd counts it: each answer then finds the client blocked (a doorbell)
and each request finds the worker blocked. Confined to different CPUs, both spin as before.
"""
import os

import pytest

from tests.harness.client import pgbench, shm_target
from tests.harness.l5pgd import L5pgd

# Counts a client's and a worker's blocks on one CPU: another test's load beside it
# answers before either would block (tests/integration/conftest.py: serial).
pytestmark = pytest.mark.serial

T = 1000  # transactions


@pytest.fixture
def pinned_l5pgd(workdir, cluster, l5pgd_binary, request):
    cpu = request.param
    d = L5pgd(workdir / f"l5pgd-cpu{cpu}", cluster, workers=1,
              extra_overrides=[f"workers.cpu_affinity=[{cpu}]"])
    d.start()
    yield d, cpu
    d.stop()


def run_confined(d, cpu):
    """pgbench -c1 under taskset -c cpu; returns (doorbells, worker blocks) it caused."""
    doorbells0 = d.metric("l5pg_doorbells_total")
    blocks0 = d.metric("l5pg_worker_blocks_total")
    target = shm_target(d)
    # A yield budget far above an answer's time even on a busy machine: a client that ends
    # its waits in a doorbell does so because of the hint, not because an answer was slow.
    r = pgbench(target, ["-S", "-M", "prepared", "-c", 1, "-t", T, "-n"],
                env={"L5PG_SPIN_US": "50", "L5PG_YIELD_US": "5000"}, cpu=cpu)
    assert r.processed == T and r.failed == 0, r.stdout
    return d.metric("l5pg_doorbells_total") - doorbells0, d.metric("l5pg_worker_blocks_total") - blocks0


def usable_cpus():
    return sorted(os.sched_getaffinity(0))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("pinned_l5pgd", [usable_cpus()[-1]], indirect=True, ids=["worker-cpu"])
def test_same_cpu_blocks_instead_of_spinning(pinned_l5pgd, pgbench_db, shim):
    d, cpu = pinned_l5pgd
    # Every answer but a few at the start (before the hints are exchanged) wakes a blocked
    # client, every request a blocked worker. This needs the CPU otherwise idle: where other
    # programs keep it busy, an answer is often there before the client would wait at all
    # (a compile beside a `make test` once made 10 doorbells in 1,000). So up to three
    # tries; a client that ignores the hint fails all three.
    for _ in range(3):
        doorbells, blocks = run_confined(d, cpu)
        if doorbells >= 0.9 * T:
            break
    assert doorbells >= 0.9 * T, (doorbells, blocks)
    assert blocks >= 0.9 * T, (doorbells, blocks)


@pytest.mark.timeout(120)
@pytest.mark.skipif(len(usable_cpus()) < 2, reason="needs two CPUs")
@pytest.mark.parametrize("pinned_l5pgd", [usable_cpus()[-1]], indirect=True, ids=["worker-cpu"])
def test_different_cpus_keep_spinning(pinned_l5pgd, pgbench_db, shim):
    d, cpu = pinned_l5pgd
    doorbells, _ = run_confined(d, usable_cpus()[0])
    # The client spins or yields (50 us + 5 ms) for answers that take tens of microseconds:
    # only outliers of milliseconds end in a doorbell.
    assert doorbells < 0.5 * T, doorbells
