"""A backend ended under a client (pg_terminate_backend) while the client's next statement
waits unread in the backend's socket: Postgres sends FATAL 57P01 and exits, and the kernel
reports ECONNRESET to whoever reads the other end after that FATAL (a Unix socket closed
with unread bytes). Directly connected, the client reads the FATAL and sees the connection
end. Through l5pgd it must read the same FATAL, and l5pgd must count an orderly close, not a
session error, on every transport (psycopg 3's test_context_inerror_rollback_no_clobber
made l5pgd count one over SHM in about half its runs)."""
import pytest

from tests.harness.client import run
from tests.harness.rdma import EVERY_TRANSPORT

ROUNDS = 20

# Each round: the victim, in pipeline mode, starts pg_sleep; once the backend sleeps, the
# victim's next statement goes out (it stays unread in the backend's socket); the killer
# terminates the victim's backend; the victim must then read the FATAL.
SCRIPT = r"""
import os, selectors, sys, time
if os.environ.get("L5PG_TEST_NO_EPOLL"):
    selectors.DefaultSelector = selectors.PollSelector
import psycopg

rounds = int(sys.argv[1])
killer = psycopg.connect(autocommit=True)

def wait_for(sql, args, want):
    deadline = time.monotonic() + 10
    while killer.execute(sql, args).fetchone()[0] != want:
        assert time.monotonic() < deadline, (sql, args, want)
        time.sleep(0.005)

for i in range(rounds):
    victim = psycopg.connect(autocommit=True)
    pid = victim.info.backend_pid
    pg = victim.pgconn
    pg.enter_pipeline_mode()
    pg.send_query_params(b"select pg_sleep(30)", None)
    pg.flush()
    wait_for("select wait_event from pg_stat_activity where pid = %s", [pid], "PgSleep")
    pg.send_query_params(b"select 2", None)
    pg.pipeline_sync()
    pg.flush()
    time.sleep(0.02)  # through l5pgd into the backend's socket, where it stays unread
    killer.execute("select pg_terminate_backend(%s)", [pid])
    r = pg.get_result()
    message = (r.error_message if r is not None else b"") or pg.error_message
    assert b"terminating connection due to administrator command" in message, message
    victim.close()
    wait_for("select count(*) from pg_stat_activity where pid = %s", [pid], 0)
print("ok", rounds)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("transport", list(EVERY_TRANSPORT))
def test_terminated_backend_is_an_orderly_close(every_transport_daemon, transport):
    daemon = every_transport_daemon
    target = EVERY_TRANSPORT[transport](daemon)
    errors = daemon.metric("l5pg_session_errors_total", transport=target.name)
    sessions = daemon.metric("l5pg_sessions_total", transport=target.name)
    r = run(["/usr/bin/python3", "-c", SCRIPT, str(ROUNDS)], target, timeout=100,
            env={"L5PG_TEST_NO_EPOLL": "1"} if transport == "rdma" else None)
    assert r.stdout.strip() == f"ok {ROUNDS}", r.stdout + r.stderr
    assert daemon.metric("l5pg_sessions_total", transport=target.name) >= sessions + ROUNDS, \
        f"the victims did not go over {target.name}"
    assert daemon.metric("l5pg_session_errors_total", transport=target.name) == errors, \
        daemon.log_tail(20)
