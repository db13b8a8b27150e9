"""On SIGTERM l5pgd tells every client why before it hangs up, like Postgres and PgBouncer:
FATAL 57P01 "terminating connection due to administrator command", so that an application
or a pooler can tell a shutdown from a crash. Checked with psql in an open transaction over
SHM, the Unix socket, TCP and RDMA (soft): psql shows what Postgres's own fast shutdown or
pg_terminate_backend() shows it."""
import signal
import subprocess

import pytest

from tests.harness.client import LineReader, make_target, popen, psql_cmd
from tests.harness.l5pgd import L5pgd
from tests.harness.rdma import rdma_overrides, rdma_target


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
