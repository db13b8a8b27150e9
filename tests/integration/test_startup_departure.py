"""Issue 21 (part 1): an SHM client that leaves in the middle of its startup, with the
client->server ring's writer_waiting flag set, must not take l5pgd down.

l5pgd reads the startup packet from the ring; the flag makes it ring the client's doorbell
on a socket that is gone. That used to close the session -- unmapping the segment -- in
the middle of the read loop, which then read the unmapped ring (SIGSEGV). Each variant
leaves at another startup step; afterwards l5pgd must still serve a new client, and a
client that published its startup, a statement and Terminate still gets the statement run
(issue 20: what a departed client published is forwarded).
"""
import struct
import time
import uuid

import pytest

from tests.harness import pgwire
from tests.harness.l5wire import OFF_C2S, RC_WRITER_WAITING, ShmClient

RING = 4096


def startup_bytes(appname):
    return pgwire.startup_packet(user="postgres", database="postgres", application_name=appname)


def query_bytes(sql):
    body = sql.encode() + b"\0"
    return b"Q" + struct.pack("!I", 4 + len(body)) + body


TERMINATE = b"X" + struct.pack("!I", 4)

# What the client publishes in its ring before it sets writer_waiting and closes.
VARIANTS = {
    "nothing": lambda app, table: b"",
    "length_only": lambda app, table: startup_bytes(app)[:4],
    "startup_but_one_byte": lambda app, table: startup_bytes(app)[:-1],
    "whole_startup": lambda app, table: startup_bytes(app),
    "startup_query_terminate": lambda app, table: (
        startup_bytes(app) + query_bytes(f"insert into {table} values (1)") + TERMINATE),
}


def serves_a_new_client(l5pgd):
    c = ShmClient(l5pgd.socket_path, c2s=RING, s2c=RING)
    try:
        assert c.upgrade() == b"L"
        msgs = c.startup(user="postgres", database="postgres")
        assert msgs[-1][0] == "Z", msgs
        rows = [b for t, b in c.query("select 'after', 6 * 7") if t == "D"]
        assert len(rows) == 1 and rows[0].endswith(b"42"), rows
    finally:
        c.close()


def wait_rows(cluster, table, want, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        got = int(cluster.sql(f"select count(*) from {table}"))
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_client_leaves_mid_startup_with_writer_waiting(l5pgd, cluster, variant):
    table = f"sd_{uuid.uuid4().hex[:8]}"
    cluster.sql(f"create table {table} (i int)")
    appname = f"startup-departure-{uuid.uuid4().hex[:8]}"
    sessions = l5pgd.metric("l5pg_sessions_total", transport="shm")
    for _ in range(20):  # the old crash needed the worker to lose a race; give it many
        c = ShmClient(l5pgd.socket_path, c2s=RING, s2c=RING)
        assert c.upgrade() == b"L"
        data = VARIANTS[variant](appname, table)
        if data:
            c.write_record_raw(len(data), data, ring=False)
        c.poke32(OFF_C2S + RC_WRITER_WAITING, 1)
        c.close(clean=False)
        assert l5pgd.alive(), f"l5pgd died ({variant})\n{l5pgd.log_tail()}"
    serves_a_new_client(l5pgd)
    assert l5pgd.alive(), f"l5pgd died ({variant})\n{l5pgd.log_tail()}"
    if variant == "startup_query_terminate":
        assert wait_rows(cluster, table, 20) == 20, l5pgd.log_tail()
        assert l5pgd.metric("l5pg_sessions_total", transport="shm") >= sessions + 20
