"""The shim's upgrade decisions (L5PG_DEBUG) and l5pgd's Prometheus metrics."""
import subprocess

import pytest

from tests.harness import paths
from tests.harness.client import (direct_unix_target, pgbench, psql, psql_cmd, run, shim_debug_lines, shim_preload,
                                  shm_target, unix_target, upgraded)


def preload_env(**kw):
    value, extra = shim_preload()
    return dict(extra, LD_PRELOAD=value, **kw)


def counters(d, transport):
    return (d.metric("l5pg_sessions_total", transport=transport),
            d.metric("l5pg_upgrades_total", result="accepted"))


@pytest.mark.timeout(60)
def test_shm_upgrade_debug(l5pgd, shim):
    t = shm_target(l5pgd)
    s0, u0 = counters(l5pgd, "shm")
    r = run(psql_cmd("-c", "select 'over shm'"), t, env={"L5PG_DEBUG": "1"})
    assert r.stdout.strip() == "over shm"
    assert upgraded(r.stderr), f"no 'upgraded to shm' in shim debug output:\n{r.stderr}"
    s1, u1 = counters(l5pgd, "shm")
    assert s1 > s0 and u1 > u0


@pytest.mark.timeout(60)
def test_shm_silent_without_debug(l5pgd, shim):
    r = run(psql_cmd("-c", "select 1"), shm_target(l5pgd))
    assert r.stdout.strip() == "1"
    assert shim_debug_lines(r.stderr) == [], r.stderr


@pytest.mark.timeout(60)
def test_shim_off_uses_unix_socket(l5pgd, shim):
    """Shim preloaded but L5PG_TRANSPORT=off: a plain Unix-socket session."""
    t = unix_target(l5pgd)
    s0 = l5pgd.metric("l5pg_sessions_total", transport="unix")
    shm0 = l5pgd.metric("l5pg_sessions_total", transport="shm")
    r = run(psql_cmd("-c", "select 'plain'"), t,
            env=preload_env(L5PG_TRANSPORT="off", L5PG_DEBUG="1"))
    assert r.stdout.strip() == "plain"
    assert not upgraded(r.stderr)
    assert l5pgd.metric("l5pg_sessions_total", transport="unix") > s0
    assert l5pgd.metric("l5pg_sessions_total", transport="shm") == shm0


@pytest.mark.timeout(60)
def test_shim_leaves_real_postgres_alone(cluster, shim):
    """Shim preloaded, connecting straight to Postgres's socket: untouched, works."""
    t = direct_unix_target(cluster)
    r = run(psql_cmd("-c", "select 'direct'"), t,
            env=preload_env(L5PG_TRANSPORT="auto", L5PG_DEBUG="1"))
    assert r.stdout.strip() == "direct"
    assert not upgraded(r.stderr), r.stderr


@pytest.mark.timeout(60)
def test_metrics_endpoint(l5pgd, target):
    psql(target, "select 1")
    text = l5pgd.metrics_text()
    for name in ["l5pg_sessions_total", "l5pg_sessions_active", "l5pg_bytes_total",
                 "l5pg_session_errors_total", "l5pg_upgrades_total",
                 "l5pg_upstream_connect_failures_total", "l5pg_startup_rejected_total"]:
        assert name in text, f"{name} missing from /metrics:\n{text[:3000]}"
    m = l5pgd.metrics()
    assert m.get(("l5pg_sessions_total", frozenset({("transport", target.name)})), 0) > 0
    assert l5pgd.metric("l5pg_bytes_total", transport=target.name, direction="client_to_server") > 0
    assert l5pgd.metric("l5pg_bytes_total", transport=target.name, direction="server_to_client") > 0


@pytest.mark.timeout(120)
def test_poll_clients_get_no_doorbell_per_response(l5pgd, pgbench_db, shim):
    """libpq waits in poll(), which the shim interposes, so a client that never has to
    block needs no doorbells. Before the shim learned to tell poll users from epoll users
    (foreign_waiters.hpp), it armed reader_waiting after every recv and l5pgd sent one
    doorbell per response."""
    n = 1000
    d0 = l5pgd.metric("l5pg_doorbells_total")
    r = pgbench(shm_target(l5pgd), ["-S", "-M", "prepared", "-c", 1, "-t", n, "-n"],
                env={"L5PG_SPIN_US": "1000000", "L5PG_YIELD_US": "0",
                     "L5PG_BLOCK_WHEN_CROWDED": "0"})  # never block
    assert r.processed == n and r.failed == 0, r.stdout
    doorbells = l5pgd.metric("l5pg_doorbells_total") - d0
    assert doorbells < n / 10, f"{doorbells} doorbells for {n} transactions"


@pytest.mark.timeout(60)
def test_round_trip_histogram_and_build_info(l5pgd, shim):
    """Each statement over SHM is one round trip to Postgres in the histogram; a 0.2 s
    pg_sleep lands above the 0.1 s bucket and at most in the 0.25 s one."""
    name = "l5pg_upstream_round_trip_seconds"
    count0 = l5pgd.metric(f"{name}_count", transport="shm")
    slow0 = l5pgd.metric(f"{name}_bucket", transport="shm", le="0.1")
    run(psql_cmd("-c", "select pg_sleep(0.2)"), shm_target(l5pgd))
    # Startup, the query, and psql's Terminate-free exit: at least two round trips.
    assert l5pgd.metric(f"{name}_count", transport="shm") >= count0 + 2
    count1 = l5pgd.metric(f"{name}_count", transport="shm")
    below = l5pgd.metric(f"{name}_bucket", transport="shm", le="0.1")
    assert count1 - below >= 1 + (count0 - slow0), "the 0.2 s statement is not above 0.1 s"
    assert l5pgd.metric(f"{name}_sum", transport="shm") >= 0.2
    version = subprocess.run([paths.L5PGD, "--version"], capture_output=True, text=True,
                             check=True).stdout.split()[-1]
    assert l5pgd.metric("l5pg_build_info", version=version) == 1
