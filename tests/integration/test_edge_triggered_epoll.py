"""An event loop that waits in an edge-triggered epoll (tokio, so rust-postgres and sqlx;
libevent's EV_ET) on an SHM connection. Such a loop reads once per edge and stops at a short
read, as tokio does (it clears readiness on a short read), so it never makes the read that
finds the ring empty, where the shim drained the doorbell bytes l5pgd sent: they piled up on
the socket, one per answer, until l5pgd's doorbell found the socket full (EAGAIN, counted as
rung: the byte already there wakes a level-triggered poller). An edge-triggered one saw no new
edge and waited for ever, after a few hundred round trips."""
import pytest

from tests.harness import paths
from tests.harness.client import run_python_json, shm_target

ROUND_TRIPS = 2000  # the socket filled up after ~280 on Debian 12's defaults

EDGE_TRIGGERED_CLIENT = r'''
import ctypes, json, select, socket, struct, sys
sys.path.insert(0, sys.argv[2])
from tests.harness import pgwire

s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(pgwire.startup_packet(application_name="l5pg-edge-triggered"))
pgwire.read_until_ready(s)
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
