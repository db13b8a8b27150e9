"""Many clients connecting at the same moment all get a session: when Postgres's listen queue
is momentarily full, its Unix socket answers EAGAIN and l5pgd retries within
upstream.connect_timeout_ms instead of failing the client."""
import os
import threading

import psycopg2
import pytest

from tests.harness.cluster import PgCluster
from tests.harness.l5pgd import L5pgd

CLIENTS = 300


@pytest.fixture(scope="module")
def roomy_cluster(workdir):
    """A cluster that admits every client of the burst (the shared one stops at 200)."""
    c = PgCluster(workdir / "pg-burst")
    c.init()
    c.add_settings(f"max_connections = {CLIENTS + 20}\n")
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.mark.timeout(180)
def test_simultaneous_connections_all_succeed(workdir, roomy_cluster):
    d = L5pgd(workdir / "l5pgd-burst", roomy_cluster, workers=2,
              extra_overrides=[f"limits.max_startup_per_peer={CLIENTS}"])
    with d:
        barrier = threading.Barrier(CLIENTS)
        errors, results = [], []
        lock = threading.Lock()
        everyone_tried = threading.Event()

        def tried():
            if len(errors) + len(results) == CLIENTS:
                everyone_tried.set()

        def client():
            conn = None
            try:
                barrier.wait(timeout=60)
                conn = psycopg2.connect(host=str(d.socket_dir), port=d.port, user="postgres",
                                        dbname="postgres", connect_timeout=30)
                with conn.cursor() as cur:
                    cur.execute("select 1")
                    value = cur.fetchone()[0]
                with lock:
                    results.append(value)
                    tried()
                everyone_tried.wait(timeout=60)  # hold every session open at once
            except Exception as e:  # noqa: BLE001 - each failure is reported below
                with lock:
                    errors.append(f"{type(e).__name__}: {e}".strip())
                    tried()
            finally:
                if conn is not None:
                    conn.close()

        threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=150)
        assert not errors, f"{len(errors)} of {CLIENTS} failed, e.g. {sorted(set(errors))[:3]}"
        assert results == [1] * CLIENTS
        assert d.alive()
        assert "/.s.PGSQL" not in "".join(errors)  # never the server's socket path
    assert os.path.exists(roomy_cluster.data_dir)
