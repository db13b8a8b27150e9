"""One doorbell per wait (transport/wait/wait_id.hpp): a pgbench thread that blocks in one
poll() over many SHM sessions arms them all under one wait name, and l5pgd rings only the
first of them that answers (daemon/doorbell_coalescer.hpp); the others' answers are found when
the woken thread looks at every ring. Likewise a worker that blocks arms all its sessions under
one name, and the client process rings it once (transport/wait/rung_waits.hpp). A doorbell
skipped wrongly would leave a sleeper with every one of its sessions waiting: pgbench would
not finish its transactions.
"""
import pytest

from tests.harness.client import pgbench, shm_target

# Runs pgbench with 16 and 32 clients at full speed: beside it, other tests' time bounds would
# measure its load (tests/integration/conftest.py: serial).
pytestmark = pytest.mark.serial

T = 300  # transactions per client
ALWAYS_BLOCK = {"L5PG_SPIN_US": "0", "L5PG_YIELD_US": "0"}


@pytest.mark.timeout(180)
def test_one_thread_many_sessions_one_doorbell_per_wait(l5pgd, pgbench_db, shim):
    sent0 = l5pgd.metric("l5pg_doorbells_total")
    skipped0 = l5pgd.metric("l5pg_doorbells_coalesced_total")
    r = pgbench(shm_target(l5pgd), ["-S", "-M", "prepared", "-c", 16, "-j", 1, "-t", T, "-n"],
                env=ALWAYS_BLOCK)
    assert r.processed == 16 * T and r.failed == 0, r.stdout
    sent = l5pgd.metric("l5pg_doorbells_total") - sent0
    skipped = l5pgd.metric("l5pg_doorbells_coalesced_total") - skipped0
    # The thread blocks for every wait that finds no answer: doorbells end those waits, and
    # answers that came in while it was woken but not yet running were not rung for.
    assert sent > 0 and skipped > 0, (sent, skipped)


@pytest.mark.timeout(180)
def test_one_session_per_thread_rings_every_wait(l5pgd, pgbench_db, shim):
    # A wait over one session has nobody to share a doorbell with.
    skipped0 = l5pgd.metric("l5pg_doorbells_coalesced_total")
    r = pgbench(shm_target(l5pgd), ["-S", "-M", "prepared", "-c", 2, "-j", 2, "-t", T, "-n"],
                env=ALWAYS_BLOCK)
    assert r.processed == 2 * T and r.failed == 0, r.stdout
    assert l5pgd.metric("l5pg_doorbells_coalesced_total") == skipped0


@pytest.mark.timeout(180)
def test_client_process_rings_each_worker_block_once(l5pgd, pgbench_db, shim):
    # 32 sessions of one pgbench thread on l5pgd's workers: while a worker sleeps, the thread
    # sends queries on several of its sessions, and only the first of them rings that worker.
    received0 = l5pgd.metric("l5pg_doorbells_received_total")
    blocks0 = l5pgd.metric("l5pg_worker_blocks_total")
    r = pgbench(shm_target(l5pgd), ["-S", "-M", "prepared", "-c", 32, "-j", 1, "-t", T, "-n"])
    assert r.processed == 32 * T and r.failed == 0, r.stdout
    received = l5pgd.metric("l5pg_doorbells_received_total") - received0
    blocks = l5pgd.metric("l5pg_worker_blocks_total") - blocks0
    # One named doorbell per block at most, from this one thread; on top a few for blocks
    # that ended before they slept (the re-check found work) and unnamed ones (a poke, a
    # full ring). Measured: 225 against 601 blocks; without names 3,500 against 814.
    assert blocks > 0 and received <= 1.5 * blocks + 32, (received, blocks)
