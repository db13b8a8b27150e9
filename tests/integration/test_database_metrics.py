"""Per-database session metrics (`metrics.labels`, daemon/database_metrics.hpp): a session is
counted under its database (and role) once Postgres accepted its login, over every
transport and through a kept server connection; a database Postgres refuses makes no
series; names are escaped as Prometheus wants; off by default."""
import pytest

from tests.harness.client import psql, shm_target, unix_target
from tests.harness.l5pgd import L5pgd
from tests.harness.waiting import wait_for

WAIT = 15  # seconds: an upper bound for closing sessions in the background
ODD_DB = 'l5pg "odd" \\ db'  # a quote and a backslash, which Prometheus escapes


@pytest.fixture(scope="module")
def odd_db(cluster):
    quoted = '"' + ODD_DB.replace('"', '""') + '"'
    if cluster.sql("select count(*) from pg_database where datname = "
                   "'" + ODD_DB.replace("'", "''") + "'") == "0":
        cluster.sql(f"create database {quoted}")


def start(workdir, cluster, name, overrides, workers=2):
    d = L5pgd(workdir / name, cluster, workers=workers, extra_overrides=overrides)
    d.start()
    return d


@pytest.fixture(scope="module")
def labelled(workdir, cluster, l5pgd_binary):
    d = start(workdir, cluster, "l5pgd-dbm", ["metrics.labels=database_user"])
    yield d
    d.stop()


def series(d, name):
    """{frozenset(labels): value} of one metric."""
    return {labels: v for (n, labels), v in d.metrics().items() if n == name}


def of(database, user=None):
    labels = {("database", database)}
    if user is not None:
        labels.add(("user", user))
    return frozenset(labels)


@pytest.mark.timeout(120)
def test_sessions_count_under_database_and_role_once_logged_in(labelled, shim, odd_db):
    for target in (shm_target(labelled), unix_target(labelled)):
        assert psql(target, "select current_user") == "postgres"
    assert psql(shm_target(labelled), "select current_database()", dbname=ODD_DB) == ODD_DB
    refused = psql(unix_target(labelled), "select 1", dbname="l5pg_no_such_db", check=False)
    assert refused.returncode != 0 and "does not exist" in refused.stderr, refused.stderr

    def all_closed():
        return all(v == 0 for v in series(labelled, "l5pg_database_sessions_active").values())
    wait_for(all_closed, WAIT, "every labelled session closed")

    totals = series(labelled, "l5pg_database_sessions_total")
    assert totals == {of("postgres", "postgres"): 2, of(ODD_DB, "postgres"): 1}, totals
    sent = series(labelled, "l5pg_database_bytes_total")
    for direction in ("client_to_server", "server_to_client"):
        key = frozenset(of("postgres", "postgres") | {("direction", direction)})
        assert sent.get(key, 0) > 0, sent
    assert labelled.metric("l5pg_database_sessions_unlabeled_total") == 0
    # The database Postgres refused is counted per transport only.
    assert "l5pg_no_such_db" not in labelled.metrics_text()
    assert labelled.metric("l5pg_sessions_total", transport="unix") >= 2


@pytest.mark.timeout(120)
def test_kept_server_connections_count_each_client_session(workdir, cluster, l5pgd_binary, shim):
    d = start(workdir, cluster, "l5pgd-dbm-pool",
              ["metrics.labels=database", "pool.mode=session"], workers=1)  # one pool
    try:
        pids = set()
        for _ in range(2):
            pids.add(psql(shm_target(d), "select pg_backend_pid()"))
            # Kept once its reset is answered: a client connecting before gets a new backend.
            wait_for(lambda: d.metric("l5pg_pool_idle_connections") == 1, WAIT,
                     "the backend kept")
        wait_for(lambda: series(d, "l5pg_database_sessions_active").get(of("postgres")) == 0,
                 WAIT, "both sessions closed")
        assert len(pids) == 1, pids  # the second client got the first one's backend
        assert d.metric("l5pg_pool_reused_total") == 1
        assert series(d, "l5pg_database_sessions_total") == {of("postgres"): 2}
    finally:
        d.stop()


@pytest.mark.timeout(60)
def test_off_by_default(l5pgd, shim):
    psql(shm_target(l5pgd), "select 1")
    assert "l5pg_database_" not in l5pgd.metrics_text()


@pytest.mark.timeout(60)
def test_physical_replication_has_no_database(labelled):
    """A physical replication connection is to no database (Postgres ignores its dbname): it
    makes no series, whatever dbname it sends (each name made one, up to the label limit)."""
    junk = "l5pg_replication_junk_db"
    out = psql(unix_target(labelled), "IDENTIFY_SYSTEM", dbname=f"replication=true dbname={junk}")
    assert out, "IDENTIFY_SYSTEM answered nothing"
    # A logical one has its database, as any session (here it does not exist: refused).
    logical = psql(unix_target(labelled), "IDENTIFY_SYSTEM", check=False,
                   dbname=f"replication=database dbname={junk}")
    assert logical.returncode != 0 and "does not exist" in logical.stderr, logical.stderr
    wait_for(lambda: all(v == 0 for v in
                         series(labelled, "l5pg_database_sessions_active").values()),
             WAIT, "every labelled session closed")
    names = {dict(labels).get("database") for labels in
             series(labelled, "l5pg_database_sessions_total")}
    assert junk not in names and "" not in names, names
