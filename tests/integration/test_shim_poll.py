"""poll() over an upgraded connection and ordinary descriptors answers as libc's would
(clientlib/interpose_poll.cpp): the count it returns is the number of entries with revents,
POLLRDNORM and POLLWRNORM mean what they mean on a socket."""
import pytest

from tests.harness.client import run_python_json, shm_target

# psycopg's connection socket is upgraded by the shim; a pipe beside it is an ordinary fd.
# poll() is called directly through ctypes, so its return value is seen as it is (Python's
# select.poll builds its result list from that count and walks past the array when the
# count is too high).
POLL_SCRIPT = r'''
import ctypes, json, os, select, psycopg

libc = ctypes.CDLL(None, use_errno=True)
shim = ctypes.CDLL(None)

class PollFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]

def poll(entries, timeout_ms):
    arr = (PollFd * len(entries))(*[PollFd(fd, ev, 0) for fd, ev in entries])
    n = libc.poll(arr, len(entries), timeout_ms)
    return n, [a.revents for a in arr]

conn = psycopg.connect("", autocommit=True)
sock = conn.pgconn.socket
out = {"transport": shim.l5pg_fd_transport(sock)}
r, w = os.pipe()
os.write(w, b"x")
# The connection has nothing to read (its ring is empty), the pipe has a byte.
out["pipe_only"] = poll([(sock, select.POLLIN), (r, select.POLLIN)], -1)
out["pipe_only_timeout"] = poll([(sock, select.POLLIN), (r, select.POLLIN)], 1000)
# Writable connection, readable pipe: two entries.
out["both"] = poll([(sock, select.POLLOUT), (r, select.POLLIN)], -1)
# POLLRDNORM / POLLWRNORM alone, as on a socket.
out["wrnorm"] = poll([(sock, select.POLLWRNORM)], 1000)
conn.pgconn.send_query(b"select 1")
while conn.pgconn.flush():
    pass
out["rdnorm"] = poll([(sock, select.POLLRDNORM)], 5000)
print(json.dumps(out))
'''


@pytest.mark.timeout(60)
def test_poll_counts_each_ready_entry_once(l5pgd, shim):
    import select
    out, _ = run_python_json(shm_target(l5pgd), POLL_SCRIPT)
    assert out["transport"] == 1, out  # L5PG_TRANSPORT_SHM
    assert out["pipe_only"] == [1, [0, select.POLLIN]], out
    assert out["pipe_only_timeout"] == [1, [0, select.POLLIN]], out
    assert out["both"] == [2, [select.POLLOUT, select.POLLIN]], out
    assert out["wrnorm"] == [1, [select.POLLWRNORM]], out
    assert out["rdnorm"] == [1, [select.POLLRDNORM]], out
