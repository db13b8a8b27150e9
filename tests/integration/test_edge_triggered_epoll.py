"""An event loop that waits in an edge-triggered epoll (tokio, so rust-postgres and sqlx;
libevent's EV_ET) on an SHM connection. Such a loop reads once per edge and stops at a short
read, as tokio does (it clears readiness on a short read), so it never makes the read that
finds the ring empty, where the shim drained the doorbell bytes l5pgd sent: they piled up on
the socket, one per answer, until l5pgd's doorbell found the socket full (EAGAIN, counted as
rung: the byte already there wakes a level-triggered poller). An edge-triggered one saw no new
edge and waited for ever, after a few hundred round trips. The same for a writer that waits
for room in the ring towards l5pgd (a COPY faster than Postgres takes it): l5pgd rings when it
has made room, once per wait."""
import pytest

from tests.harness import paths
from tests.harness.client import run_python_json, shm_target

ROUND_TRIPS = 2000  # the socket filled up after ~280 on Debian 12's defaults

EDGE_TRIGGERED_CLIENT = r'''
import ctypes, json, select, struct, sys
sys.path.insert(0, sys.argv[2])
from tests.harness import pgwire

s = pgwire.unix_login(sys.argv[1], application_name="l5pg-edge-triggered")
transport = ctypes.CDLL(None).l5pg_fd_transport(s.fileno())
s.setblocking(False)
ep = select.epoll()
ep.register(s.fileno(), select.EPOLLIN | select.EPOLLET)
sql = b"select 1\0"
query = b"Q" + struct.pack("!I", 4 + len(sql)) + sql
done, stuck = 0, False
for _ in range(int(sys.argv[3])):
    s.send(query)
    answer = b""
    while answer[-6:-1] != b"Z\0\0\0\x05":  # up to its ReadyForQuery
        if not ep.poll(10):
            stuck = True
            break
        try:
            answer += s.recv(65536)  # once per edge: a short read means drained
        except BlockingIOError:
            pass
    if stuck:
        break
    done += 1
print(json.dumps({"transport": transport, "done": done, "stuck": stuck}))
'''


@pytest.mark.timeout(120)
def test_edge_triggered_reader_is_woken_for_every_answer(l5pgd, shim):
    out, r = run_python_json(shm_target(l5pgd), EDGE_TRIGGERED_CLIENT,
                             args=[str(l5pgd.socket_path), str(paths.REPO), str(ROUND_TRIPS)],
                             timeout=100)
    assert out["transport"] == 1, (out, r.stderr)  # L5PG_TRANSPORT_SHM
    assert out == {"transport": 1, "done": ROUND_TRIPS, "stuck": False}, l5pgd.log_tail()


# COPY FROM STDIN through a 64 KiB ring: the client fills it, waits for the edge of l5pgd's
# doorbell (room made), writes on, never reading until the COPY ends.
EDGE_TRIGGERED_WRITER = r"""
import ctypes, json, select, struct, sys
sys.path.insert(0, sys.argv[2])
from tests.harness import pgwire

def message(kind, body):
    return kind + struct.pack("!I", 4 + len(body)) + body

s = pgwire.unix_login(sys.argv[1], application_name="l5pg-edge-triggered-copy")
pgwire.query(s, "create temp table copied (x text)")
transport = ctypes.CDLL(None).l5pg_fd_transport(s.fileno())
s.setblocking(False)
ep = select.epoll()
wanted = select.EPOLLOUT | (select.EPOLLIN if sys.argv[4] == "in_and_out" else 0)
ep.register(s.fileno(), wanted | select.EPOLLET)
rows = int(sys.argv[3])
out = message(b"Q", b"copy copied from stdin\0")
out += b"".join(message(b"d", b"x" * 8000 + b"\n") for _ in range(rows)) + message(b"c", b"")
sent, stuck, waits = 0, False, 0
while sent < len(out):
    try:
        sent += s.send(out[sent:sent + 65536])
    except BlockingIOError:
        waits += 1
        if not ep.poll(10):  # room made: l5pgd's doorbell is the edge
            stuck = True
            break
ep.modify(s.fileno(), select.EPOLLIN | select.EPOLLET)  # now for the answer
answer = b""
while not stuck and answer[-6:-1] != b"Z\0\0\0\x05":
    if not ep.poll(10):
        stuck = True
        break
    try:
        answer += s.recv(65536)
    except BlockingIOError:
        pass
print(json.dumps({"transport": transport, "sent": sent, "stuck": stuck, "waits": waits,
                  "copied": (b"COPY %d\0" % rows) in answer}))
"""

ROWS = 8000  # 64 MB through a 64 KiB ring: room waited for ~1,400 times here


# Registered for writing alone ("out"), the writer was never woken: l5pgd's doorbell for room
# makes the socket readable, a wake-up an edge-triggered EPOLLOUT registration never sees
# (clientlib/interpose_epoll.cpp adds EPOLLIN to it).
@pytest.mark.timeout(120)
@pytest.mark.parametrize("registered", ["in_and_out", "out"])
def test_edge_triggered_writer_is_woken_when_room_is_made(l5pgd, shim, registered):
    out, r = run_python_json(shm_target(l5pgd), EDGE_TRIGGERED_WRITER,
                             args=[str(l5pgd.socket_path), str(paths.REPO), str(ROWS), registered],
                             timeout=100, env={"L5PG_RING_SIZE": "65536"})
    assert out["transport"] == 1, (out, r.stderr)  # L5PG_TRANSPORT_SHM
    assert not out["stuck"] and out["copied"], (out, l5pgd.log_tail())
    # More waits than doorbell bytes fit on a socket, or the test proves nothing.
    assert out["waits"] > 300, out
