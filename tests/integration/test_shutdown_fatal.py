"""On SIGTERM l5pgd tells every client why before it hangs up, like Postgres and PgBouncer:
FATAL 57P01 "terminating connection due to administrator command", so that an application
or a pooler can tell a shutdown from a crash. Checked with psql in an open transaction over
SHM, the Unix socket, TCP and RDMA (soft): psql shows what Postgres's own fast shutdown or
pg_terminate_backend() shows it."""
import signal
import subprocess
import time

import pytest

from tests.harness.cancel import wait_for_backend
from tests.harness.client import LineReader, make_target, popen, psql_cmd
from tests.harness.l5pgd import L5pgd
from tests.harness.rdma import rdma_overrides, rdma_target
from tests.harness.waiting import wait_for


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["shm", "unix", "tcp", "rdma"])
def test_clients_in_a_transaction_get_57P01_on_sigterm(workdir, cluster, kind):
    d = L5pgd(workdir / f"l5pgd-sigterm-{kind}", cluster, extra_overrides=rdma_overrides("soft"))
    d.start()
    client = None
    try:
        target = rdma_target(d) if kind == "rdma" else make_target(kind, d)
        client = popen(psql_cmd("-v", "VERBOSITY=verbose", "-v", "ON_ERROR_STOP=0"), target,
                       stdin=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = LineReader(client.stdout)
        client.stdin.write("begin;\nselect 'ready';\n")
        client.stdin.flush()
        assert lines.wait_for(lambda ln: ln == "ready", 30) == "ready", lines.lines
        d.proc.send_signal(signal.SIGTERM)
        d.proc.wait(timeout=30)
        client.stdin.write("select 2;\n")
        client.stdin.close()
        client.wait(timeout=30)  # bounded: psql must not hang on the closed connection
        lines.wait_for(lambda ln: False, 2)
        assert "FATAL:  57P01: terminating connection due to administrator command" \
            in lines.lines, lines.lines
    finally:
        if client is not None and client.poll() is None:
            client.kill()
        d.stop()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["shm", "unix"])
def test_statement_running_at_sigterm_is_cancelled_not_committed(workdir, cluster, kind):
    """Postgres notices a closed connection only when it next reads or writes it: an
    autocommit INSERT that was still running when l5pgd stopped ran on and committed, while
    its client had been told 57P01, as if it had been cut short. l5pgd now cancels the
    statements it still waits for before it closes their sessions, as Postgres's own fast
    shutdown interrupts them: nothing is inserted, and the backend is gone at once."""
    table = f"sigterm_running_{kind}"
    cluster.sql(f"create table if not exists {table} (note text)")
    d = L5pgd(workdir / f"l5pgd-sigterm-running-{kind}", cluster)
    d.start()
    client = None
    app = f"sigterm-running-{kind}"
    try:
        # Postgres's default client_connection_check_interval (0): the test cluster's (1 s)
        # would notice the closed connection.
        client = popen(psql_cmd("-c", f"insert into {table} select 'committed' from pg_sleep(3)"),
                       make_target(kind, d), text=True,
                       env={"PGAPPNAME": app, "PGOPTIONS": "-c client_connection_check_interval=0"})
        wait_for_backend(cluster, app)
        d.proc.send_signal(signal.SIGTERM)
        d.proc.wait(timeout=30)
        wait_for(lambda: cluster.sql(f"select count(*) from pg_stat_activity "
                                     f"where application_name = '{app}'") == "0",
                 2, "the backend to end before its statement could (pg_sleep(3))")
        time.sleep(3)  # past the statement's end, had it gone on
        assert cluster.sql(f"select count(*) from {table}") == "0", "the INSERT committed"
        assert "cancelled 1 of 1 statements still running" in d.log_text(), d.log_tail()
    finally:
        if client is not None and client.poll() is None:
            client.kill()
        d.stop()
        cluster.sql(f"drop table if exists {table}")
