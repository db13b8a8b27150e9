"""The crowding gauge (transport/wait/crowding_gauge.hpp): a client thread that spins for its
answers while every CPU is busy and other threads queue behind it blocks instead, and l5pgd
then owes it a doorbell per answer. With L5PG_BLOCK_WHEN_CROWDED=0 the same client spins
through the same load. The spin budget (50 ms) outlasts every answer, so only the gauge can
make the client block. Busy loops, twice as many as the usable CPUs, crowd them.
"""
import os
import subprocess
import sys

import pytest

from tests.harness.client import pgbench, shm_target

SPIN_ONLY = {"L5PG_SPIN_US": "50000", "L5PG_YIELD_US": "0"}


@pytest.fixture
def crowded_cpus():
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(2 * len(os.sched_getaffinity(0)))]
    yield
    for hog in hogs:
        hog.kill()
        hog.wait()


def doorbells_during(l5pgd, env):
    before = l5pgd.metric("l5pg_doorbells_total")
    r = pgbench(shm_target(l5pgd), ["-S", "-M", "prepared", "-c", 1, "-T", 3, "-n"], env=env)
    assert r.failed == 0 and r.processed > 0, r.stdout
    return l5pgd.metric("l5pg_doorbells_total") - before, r.processed


@pytest.mark.timeout(120)
def test_crowded_client_blocks_unless_told_not_to(l5pgd, pgbench_db, shim, crowded_cpus):
    blocked, n_on = doorbells_during(l5pgd, {**SPIN_ONLY, "L5PG_BLOCK_WHEN_CROWDED": "1"})
    spun, n_off = doorbells_during(l5pgd, {**SPIN_ONLY, "L5PG_BLOCK_WHEN_CROWDED": "0"})
    # Blocking once a back-off began: every answer in it woke a blocked client.
    assert blocked >= 100, (blocked, n_on, spun, n_off)
    # Spinning: a doorbell only while connecting, or for an answer that took 50 ms.
    assert spun < blocked / 4, (blocked, n_on, spun, n_off)
