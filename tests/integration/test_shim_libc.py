"""The shim's interposed calls answer as libc's would on an upgraded connection: poll() over
it and ordinary descriptors (clientlib/interpose_poll.cpp) returns the number of entries with
revents, POLLRDNORM and POLLWRNORM mean what they mean on a socket; connect() on it fails
with EISCONN and leaves the connection as it was (clientlib/interpose_fd.cpp); readv(),
writev(), sendmsg() and recvmsg() check their vector as the kernel does
(clientlib/interpose_io.cpp); a call that another thread's close() overtakes goes on with the
connection it began with (clientlib/channel_ref.hpp); invalid timeouts are EINVAL; a
zero-byte recv() is EAGAIN on an empty connection (clientlib/channel.cpp); a vfork() child's
dup2() and close() leave the parent its connection (clientlib/fd_table.cpp); poll() in a
signal handler does not allocate (tests/tools/libc_probe.cpp makes those calls);
close_range() and closefrom() close an upgraded fd as close() does, and Python's subprocess
(close_range() in a vfork() child) leaves the parent its connection; flags the rings cannot
carry (MSG_OOB, MSG_ERRQUEUE, an address) get the kernel's answers, not the stream; select()
for exceptions alone waits out a hang-up, as the kernel's does; a dup() during the upgrade
gets its outcome; ioctl(FIONREAD) counts the ring's bytes. Where
they can, the tests hold the shim's answer against a plain socketpair's."""
import os
import select
import signal

import pytest

from tests.harness import paths
from tests.harness import fionread, libc_types, socket_flags
from tests.harness.client import direct_unix_target, run, run_python_json, shm_target
from tests.harness.waiting import wait_for

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


# A second connect() on a connected socket is EISCONN and changes nothing; some event loops
# call it to learn that a non-blocking connect() finished.
CONNECT_AGAIN_SCRIPT = r'''
import ctypes, errno, json, socket, sys, psycopg

libc = ctypes.CDLL(None, use_errno=True)
shim = ctypes.CDLL(None)

class SockaddrUn(ctypes.Structure):
    _fields_ = [("sun_family", ctypes.c_ushort), ("sun_path", ctypes.c_char * 108)]

conn = psycopg.connect("", autocommit=True)
sock = conn.pgconn.socket
before = shim.l5pg_fd_transport(sock)
addr = SockaddrUn(socket.AF_UNIX, sys.argv[1].encode())
rc = libc.connect(sock, ctypes.byref(addr), ctypes.sizeof(addr))
err = ctypes.get_errno()
row = conn.execute("select 40 + 2").fetchone()[0]
print(json.dumps({"before": before, "rc": rc, "eisconn": err == errno.EISCONN,
                  "after": shim.l5pg_fd_transport(sock), "row": row}))
'''


@pytest.mark.timeout(60)
def test_connect_again_is_eisconn_and_keeps_the_connection(l5pgd, shim):
    out, _ = run_python_json(shm_target(l5pgd), CONNECT_AGAIN_SCRIPT,
                             args=[str(l5pgd.socket_path)])
    assert out == {"before": 1, "rc": -1, "eisconn": True, "after": 1, "row": 42}, out


IOV_SCRIPT = r'''
import ctypes, errno, json, os, psycopg

libc = ctypes.CDLL(None, use_errno=True)
shim = ctypes.CDLL(None)
''' + libc_types.MSGHDR + r'''

conn = psycopg.connect("", autocommit=True)
sock = conn.pgconn.socket
buf = ctypes.create_string_buffer(16)
iovs = (Iovec * 1025)(*[Iovec(ctypes.cast(buf, ctypes.c_void_p), 1) for _ in range(1025)])
huge = (Iovec * 2)(Iovec(ctypes.cast(buf, ctypes.c_void_p), 2**63),  # negative as ssize_t
                   Iovec(ctypes.cast(buf, ctypes.c_void_p), 2))

def call(f, *args):
    ctypes.set_errno(0)
    rc = f(*args)
    return [rc, errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno())]

msg = Msghdr(None, 0, iovs, 1025, None, 0, 0)
out = {
    "transport": shim.l5pg_fd_transport(sock),
    "readv_negative": call(libc.readv, sock, iovs, -1),
    "writev_too_many": call(libc.writev, sock, iovs, 1025),
    "writev_overflow": call(libc.writev, sock, huge, 2),
    "sendmsg_too_many": call(libc.sendmsg, sock, ctypes.byref(msg), 0),
    "recvmsg_too_many": call(libc.recvmsg, sock, ctypes.byref(msg), 0),
    "row": conn.execute("select 7").fetchone()[0],
}
print(json.dumps(out))
'''


@pytest.mark.timeout(60)
def test_vector_calls_check_their_vector_as_the_kernel_does(l5pgd, shim):
    out, _ = run_python_json(shm_target(l5pgd), IOV_SCRIPT)
    assert out == {"transport": 1, "readv_negative": [-1, "EINVAL"],
                   "writev_too_many": [-1, "EINVAL"], "writev_overflow": [-1, "EINVAL"],
                   "sendmsg_too_many": [-1, "EMSGSIZE"], "recvmsg_too_many": [-1, "EMSGSIZE"],
                   "row": 7}, out


# A script's opening: a connection whose statement (0.5 s, then 42) is on its way; `libc`,
# `conn`, `pg` and its socket `sock` for what follows.
QUERY_IN_FLIGHT = r'''
libc = ctypes.CDLL(None, use_errno=True)
conn = psycopg.connect("", autocommit=True)
pg = conn.pgconn
sock = pg.socket
pg.send_query(b"select pg_sleep(0.5), 42")
while pg.flush():
    pass
'''


# Thread A waits in a blocking recv() for the answer to pg_sleep(0.5); thread B closes the
# fd after 0.2 s. With libc, A's recv() goes on with the socket it began with and returns the
# answer; the shim used to free the channel under it (a crash).
CLOSE_UNDER_RECV_SCRIPT = r'''
import ctypes, fcntl, json, os, threading, time, psycopg
''' + QUERY_IN_FLIGHT + r'''flags = fcntl.fcntl(sock, fcntl.F_GETFL)
fcntl.fcntl(sock, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
out = {}

def reader():
    buf = ctypes.create_string_buffer(4096)
    n = libc.recv(sock, buf, 4096, 0)
    out["recv"] = n
    out["errno"] = ctypes.get_errno()
    out["has_42"] = n > 0 and b"42" in buf.raw[:n]

t = threading.Thread(target=reader)
t.start()
time.sleep(0.2)
out["close"] = libc.close(sock)
t.join(10)
out["reader_done"] = not t.is_alive()
print(json.dumps(out), flush=True)
os._exit(0)  # psycopg would close the fd again
'''


@pytest.mark.timeout(60)
def test_close_by_another_thread_leaves_a_waiting_recv_its_connection(l5pgd, shim):
    out, r = run_python_json(shm_target(l5pgd), CLOSE_UNDER_RECV_SCRIPT)
    assert out["close"] == 0 and out["reader_done"], (out, r.stderr)
    assert out["recv"] > 0 and out["has_42"], (out, r.stderr)


# poll() on an upgraded connection that another thread closes, whose number a new socket
# then takes: when the poll wakes (the answer's doorbell on the old socket), the number's
# new file is not drained as if it were the old connection's doorbell socket, and poll()
# reports what the number names now, as libc's poll() goes on with the number.
CLOSE_UNDER_POLL_SCRIPT = r'''
import ctypes, json, os, select, socket, threading, time, psycopg
''' + QUERY_IN_FLIGHT + r'''out = {}

class PollFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]

def poller():
    p = PollFd(sock, select.POLLIN, 0)
    out["poll"] = libc.poll(ctypes.byref(p), 1, 5000)
    out["revents"] = p.revents

t = threading.Thread(target=poller)
t.start()
time.sleep(0.2)
out["close"] = libc.close(sock)
a, b = socket.socketpair()
out["reused"] = a.fileno() == sock
b.send(b"x")
t.join(10)
out["poller_done"] = not t.is_alive()
try:
    out["new_socket_kept"] = a.recv(1, socket.MSG_DONTWAIT).decode()
except BlockingIOError:
    out["new_socket_kept"] = ""
print(json.dumps(out), flush=True)
os._exit(0)  # psycopg would close the fd again
'''


@pytest.mark.timeout(60)
def test_close_by_another_thread_under_poll_leaves_the_new_file_its_bytes(l5pgd, shim):
    out, r = run_python_json(shm_target(l5pgd), CLOSE_UNDER_POLL_SCRIPT)
    assert out["close"] == 0 and out["reused"] and out["poller_done"], (out, r.stderr)
    assert out["poll"] == 1 and out["revents"] & select.POLLIN, (out, r.stderr)
    assert out["new_socket_kept"] == "x", (out, r.stderr)


# The start of the scripts of two threads on one connection: psycopg's socket, made blocking
# when the threads wait in blocking calls (argv[1]), and poll_for() on it through the shim.
TWO_THREADS_PRELUDE = r'''
import ctypes, errno, fcntl, json, os, select, struct, sys, threading, psycopg

libc = ctypes.CDLL(None, use_errno=True)
waits_in = sys.argv[1]
conn = psycopg.connect("", autocommit=True)
sock = conn.pgconn.socket
if waits_in == "blocking_calls":
    flags = fcntl.fcntl(sock, fcntl.F_GETFL)
    fcntl.fcntl(sock, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)

class PollFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]

def poll_for(events, timeout_ms):
    p = PollFd(sock, events, 0)
    return libc.poll(ctypes.byref(p), 1, timeout_ms)

def run_threads(*functions):
    """Runs each function in a thread, gives them 20 s each; which of them are stuck."""
    threads = [threading.Thread(target=f, daemon=True) for f in functions]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    return [t.is_alive() for t in threads]
'''


# One thread writes a COPY of 50 MB (the ring fills again and again), another waits for the
# answer on the same connection: both sleep on the one socket, and the waiter for the answer
# drained the doorbell l5pgd rang for room, which nothing rang again. Both threads slept for
# ever (clientlib/end_waiters.hpp, may_miss_doorbell()). The threads wait in blocking send()
# and recv(), or in poll() beside non-blocking calls.
SHARED_COPY_SCRIPT = TWO_THREADS_PRELUDE + r'''
conn.execute("create temporary table t (x text)")

def message(kind, body):
    return kind + struct.pack("!i", len(body) + 4) + body

def send_all(data):
    buf = ctypes.create_string_buffer(data, len(data))
    sent = 0
    while sent < len(data):
        n = libc.send(sock, ctypes.byref(buf, sent), len(data) - sent, 0)
        if n < 0 and ctypes.get_errno() == errno.EAGAIN:
            assert poll_for(select.POLLOUT, -1) == 1
        elif n < 0:
            raise OSError(ctypes.get_errno(), "send")
        else:
            sent += n

ROWS = 50_000
answer = bytearray()

def reader():
    buf = ctypes.create_string_buffer(65536)
    while b"COPY" not in answer or not answer.endswith(b"Z\0\0\0\x05I"):
        if waits_in == "poll":
            assert poll_for(select.POLLIN, -1) == 1
        n = libc.recv(sock, buf, 65536, 0)
        if n == 0 or (n < 0 and ctypes.get_errno() != errno.EAGAIN):
            return
        answer.extend(buf.raw[:max(n, 0)])

def writer():
    send_all(message(b"Q", b"copy t from stdin\0"))
    rows = message(b"d", b"x" * 1000 + b"\n") * 50
    for _ in range(ROWS // 50):
        send_all(rows)
    send_all(message(b"c", b""))

stuck = run_threads(reader, writer)
print(json.dumps({"transport": ctypes.CDLL(None).l5pg_fd_transport(sock), "stuck": stuck,
                  "copied": b"COPY %d" % ROWS in answer}), flush=True)
os._exit(0)
'''


@pytest.mark.timeout(90)
@pytest.mark.parametrize("waits_in", ["blocking_calls", "poll"])
def test_copy_beside_a_thread_waiting_for_its_answer(l5pgd, shim, waits_in):
    out, r = run_python_json(shm_target(l5pgd), SHARED_COPY_SCRIPT, args=[waits_in])
    assert out == {"transport": 1, "stuck": [False, False], "copied": True}, (out, r.stderr)


# One thread runs 1000 queries, waiting for each answer in recv() or poll(); another only
# polls the connection (as one waiting for a NOTIFY would). The poller used to drain the
# doorbell of an answer and return, and the thread the answer was for slept on, for ever:
# now a byte is left on the socket while another waiter is ready (end_waiters.hpp,
# doorbell_owed_to_others()).
WATCHED_QUERIES_SCRIPT = TWO_THREADS_PRELUDE + r'''
ROUNDS = 1000
query = b"Q" + struct.pack("!i", 4 + 9) + b"select 1\0"
answered = 0
done = False

def querier():
    global answered, done
    buf = ctypes.create_string_buffer(65536)
    for _ in range(ROUNDS):
        assert libc.send(sock, query, len(query), 0) == len(query)
        answer = b""
        while not answer.endswith(b"Z\0\0\0\x05I"):
            if waits_in == "poll":
                poll_for(select.POLLIN, -1)
            n = libc.recv(sock, buf, 65536, 0)
            if n == 0 or (n < 0 and ctypes.get_errno() != errno.EAGAIN):
                return
            answer += buf.raw[:max(n, 0)]
        answered += 1
    done = True

def watcher():
    while not done:
        poll_for(select.POLLIN, 100)

stuck = run_threads(querier, watcher)
print(json.dumps({"transport": ctypes.CDLL(None).l5pg_fd_transport(sock), "stuck": stuck,
                  "answered": answered}), flush=True)
os._exit(0)
'''


@pytest.mark.timeout(90)
@pytest.mark.parametrize("waits_in", ["blocking_calls", "poll"])
def test_queries_beside_a_thread_polling_the_connection(l5pgd, shim, waits_in):
    out, r = run_python_json(shm_target(l5pgd), WATCHED_QUERIES_SCRIPT, args=[waits_in])
    assert out == {"transport": 1, "stuck": [False, False], "answered": 1000}, (out, r.stderr)


# In a forked child the parent's upgraded connection is hung up (EOF, EPIPE): poll() says
# POLLHUP always, POLLIN and POLLOUT where they were asked for, as for a socket whose peer
# left (a socketpair beside it, its peer closed, is the yardstick).
FORKED_POLL_SCRIPT = r'''
import json, os, select, socket, psycopg

conn = psycopg.connect("", autocommit=True)
sock = conn.pgconn.socket
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    a, b = socket.socketpair()
    b.close()
    out = {}
    for name, events in (("in", select.POLLIN), ("out", select.POLLOUT)):
        for fd, kind in ((sock, "shim"), (a.fileno(), "socket")):
            p = select.poll()
            p.register(fd, events)
            out[f"{kind}_{name}"] = [rev for _, rev in p.poll(1000)]
    os.write(w, json.dumps(out).encode())
    os._exit(0)
os.waitpid(pid, 0)
child = json.loads(os.read(r, 4096))
print(json.dumps({"child": child, "parent_row": conn.execute("select 5").fetchone()[0]}))
'''


@pytest.mark.timeout(60)
def test_forked_child_polls_the_parents_connection_as_hung_up(l5pgd, shim):
    import select
    out, _ = run_python_json(shm_target(l5pgd), FORKED_POLL_SCRIPT)
    child = out["child"]
    assert child["shim_in"] == child["socket_in"] == [select.POLLIN | select.POLLHUP], out
    assert child["shim_out"] == child["socket_out"] == [select.POLLOUT | select.POLLHUP], out
    assert out["parent_row"] == 5, out


# Timeouts the kernel refuses (EINVAL) or accepts (select() carries whole seconds out of
# tv_usec), on the upgraded connection and on a plain socket beside it.
TIMEOUT_SCRIPT = r'''
import ctypes, errno, json, socket, psycopg

libc = ctypes.CDLL(None, use_errno=True)

class PollFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]

class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]

class Timeval(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long)]

class FdSet(ctypes.Structure):
    _fields_ = [("bits", ctypes.c_ulong * 16)]

def fdset(fd):
    s = FdSet()
    s.bits[fd // 64] |= 1 << (fd % 64)
    return s

def call(f, *args):
    ctypes.set_errno(0)
    rc = f(*args)
    return [rc, errno.errorcode.get(ctypes.get_errno(), 0) if rc < 0 else None]

def cases(fd):
    pfd = PollFd(fd, 1, 0)  # POLLIN: nothing to read
    return {
        "ppoll_nsec_1e9": call(libc.ppoll, ctypes.byref(pfd), 1, ctypes.byref(Timespec(0, 10**9)), None),
        "ppoll_negative": call(libc.ppoll, ctypes.byref(pfd), 1, ctypes.byref(Timespec(-1, 0)), None),
        "select_negative_usec": call(libc.select, fd + 1, ctypes.byref(fdset(fd)), None, None,
                                     ctypes.byref(Timeval(0, -1))),
        "select_usec_carried": call(libc.select, fd + 1, ctypes.byref(fdset(fd)), None, None,
                                    ctypes.byref(Timeval(0, 1_100_000))),
        "pselect_negative": call(libc.pselect, fd + 1, ctypes.byref(fdset(fd)), None, None,
                                 ctypes.byref(Timespec(-1, 0)), None),
    }

conn = psycopg.connect("", autocommit=True)
a, b = socket.socketpair()
print(json.dumps({"shim": cases(conn.pgconn.socket), "socket": cases(a.fileno())}))
'''


@pytest.mark.timeout(60)
def test_invalid_timeouts_are_einval_as_for_a_socket(l5pgd, shim):
    out, _ = run_python_json(shm_target(l5pgd), TIMEOUT_SCRIPT)
    assert out["shim"] == out["socket"], out
    assert out["shim"]["ppoll_nsec_1e9"] == [-1, "EINVAL"], out
    assert out["shim"]["select_usec_carried"] == [0, None], out


# recv() of zero bytes: EAGAIN on an empty non-blocking connection, 0 once there is something
# to read (which stays there), as on a socketpair; read() and readv() of zero bytes: 0 at once.
ZERO_RECV_SCRIPT = r'''
import ctypes, errno, json, select, socket, psycopg

libc = ctypes.CDLL(None, use_errno=True)
MSG_DONTWAIT = 0x40
buf = ctypes.create_string_buffer(64)

def zero_recv(fd):
    ctypes.set_errno(0)
    rc = libc.recv(fd, buf, 0, MSG_DONTWAIT)
    return [rc, errno.errorcode.get(ctypes.get_errno(), 0) if rc < 0 else None]

class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

def zero_reads(fd):
    ctypes.set_errno(0)
    empty_iov = (IoVec * 2)(IoVec(ctypes.addressof(buf), 0), IoVec(ctypes.addressof(buf), 0))
    return [libc.read(fd, buf, 0), libc.readv(fd, empty_iov, 2), libc.readv(fd, empty_iov, 0),
            ctypes.get_errno()]

def cases(fd, make_readable):
    empty = zero_recv(fd)
    empty_reads = zero_reads(fd)
    make_readable()
    select.select([fd], [], [], 5)
    readable = zero_recv(fd)
    return {"empty": empty, "empty_reads": empty_reads, "readable": readable,
            "then": libc.recv(fd, buf, 64, MSG_DONTWAIT) > 0}

conn = psycopg.connect("", autocommit=True)
pg = conn.pgconn

def query():
    pg.send_query(b"select 1")
    while pg.flush():
        pass

a, b = socket.socketpair()
print(json.dumps({"transport": ctypes.CDLL(None).l5pg_fd_transport(pg.socket),
                  "shim": cases(pg.socket, query),
                  "socket": cases(a.fileno(), lambda: b.send(b"x"))}))
'''


@pytest.mark.timeout(60)
def test_zero_byte_recv_answers_as_on_a_socket(l5pgd, shim):
    out, _ = run_python_json(shm_target(l5pgd), ZERO_RECV_SCRIPT)
    assert out["transport"] == 1, out  # L5PG_TRANSPORT_SHM
    assert out["shim"] == out["socket"], out
    assert out["shim"] == {"empty": [-1, "EAGAIN"], "empty_reads": [0, 0, 0, 0],
                           "readable": [0, None], "then": True}, out


PROBE = paths.BUILD_DIR / "bin" / "l5pg-libc-probe"


def probe(l5pgd, mode):
    r = run([PROBE, mode], shm_target(l5pgd), timeout=30)
    return dict(field.split("=", 1) for field in r.stdout.split())


# A vfork() child shares its parent's memory until it execs or exits; Python's subprocess
# makes one and dup2()s and close()s descriptors in it. What the child does to its own fds
# must leave the parent's connection (and the shim's table of it) as it was.
@pytest.mark.timeout(60)
def test_vfork_child_closing_the_connection_leaves_the_parent_its_connection(l5pgd, shim):
    out = probe(l5pgd, "vfork")
    assert out == {"transport": "1", "spare": "0", "answer": "42"}, out


# The program's descriptors are its own: an upgraded connection holds its socket only (the
# memfd went to l5pgd with the upgrade request and is closed once l5pgd has answered), so a
# program that closes what it does not know of and reuses the number loses nothing to the
# shim, nor has the shim close it later.
FDS_SCRIPT = r"""
import json, os, psycopg
def fds():
    names = {}
    for f in os.listdir("/proc/self/fd"):
        try:
            names[int(f)] = os.readlink(f"/proc/self/fd/{f}")
        except FileNotFoundError:  # listdir's own descriptor, closed by now
            pass
    return names
before = fds()
c = psycopg.connect()
c.execute("select 1")
after = fds()
print(json.dumps({"new": {f: t for f, t in after.items() if before.get(f) != t},
                  "socket": str(c.fileno())}))
c.close()
"""


@pytest.mark.timeout(60)
def test_an_upgraded_connection_holds_no_descriptor_but_its_socket(l5pgd, shim):
    out, r = run_python_json(shm_target(l5pgd), FDS_SCRIPT, env={"L5PG_DEBUG": "1"})
    assert "upgraded to shm" in r.stderr, r.stderr
    assert list(out["new"]) == [out["socket"]], out
    assert out["new"][out["socket"]].startswith("socket:"), out


# pthread_cancel() unwinds the cancelled thread's stack from inside the blocking call: the
# shim's frames in between must let the unwinding through (no noexcept, catch (...) rethrows
# abi::__forced_unwind) and with the unwinder glibc loads (libgcc_s, not a static copy).
# Before, any program that cancelled a thread blocked in read() aborted under the shim.
@pytest.mark.timeout(60)
def test_pthread_cancel_of_a_blocked_thread_cancels_it(l5pgd, cluster, shim):
    out = probe(l5pgd, "pthread-cancel")
    assert out == {"pipe": "cancelled", "conn": "cancelled", "transport": "1", "after": "42"}, out


# A cancel pending when a connection's first send upgrades it waits for the upgrade's end:
# acted upon inside (the upgrade request's sendmsg() is a cancellation point) it left the fd
# half upgraded for good, every later call on it waiting and failing.
@pytest.mark.timeout(60)
def test_pthread_cancel_pending_at_the_upgrade_waits_for_its_end(l5pgd, shim):
    r = run([PROBE, "cancel-during-upgrade"], shm_target(l5pgd), timeout=40,
            env={"L5PG_UPGRADE_TIMEOUT_MS": "1000"})
    out = dict(field.split("=", 1) for field in r.stdout.split())
    assert out == {"thread": "cancelled", "transport": "1", "after": "42"}, (out, r.stderr)


# exit() runs the static destructors while other threads go on: the shim's channels are never
# destroyed (the kernel unmaps the rings when the process ends), or a thread still polling a
# connection at exit crashed the process on its way out. Several runs: the crash needs the
# thread to look at the ring after the destructor ran.
@pytest.mark.timeout(120)
def test_exit_with_a_thread_polling_a_connection(l5pgd, shim):
    for _ in range(10):
        assert probe(l5pgd, "exit-while-polling") == {"transport": "1"}


# _Fork() is fork() without the fork handlers (glibc 2.34; for forking in a signal handler):
# its child must not write into the parent's rings, nor keep the entry of the fd it closed
# for the pipe that gets its number.
@pytest.mark.timeout(60)
def test_fork_without_handlers_child_leaves_the_parent_its_connection(l5pgd, shim):
    out = probe(l5pgd, "_Fork")
    assert out == {"child_send": "EPIPE", "child_pipe_fd": "same", "child_pipe_transport": "0",
                   "child_pipe": "p", "transport": "1", "answer": "42"}, out


# libuv (1.45 and later: Node.js, uvloop) registers sockets with epoll through io_uring, where
# the epoll_ctl interposer does not see it: with an io_uring instance open, the shim keeps
# the socket readable whenever data waits, and the answer wakes the epoll wait.
@pytest.mark.timeout(60)
def test_epoll_registered_unseen_beside_an_io_uring_still_wakes(l5pgd, shim):
    out = probe(l5pgd, "io-uring-epoll")
    if out["io_uring"] == "unavailable":
        pytest.skip("io_uring_setup() refused here (kernel.io_uring_disabled, seccomp)")
    assert out == {"io_uring": "yes", "transport": "1", "answer": "42"}, out


# poll() is async-signal-safe: a signal handler may poll an upgraded fd, so the shim must not
# call malloc there (a signal that interrupts malloc would deadlock on its lock).
@pytest.mark.timeout(60)
def test_poll_in_a_signal_handler_does_not_allocate(l5pgd, shim):
    import select
    out = probe(l5pgd, "poll-in-handler")
    if out["mallocs"] == "-1":
        pytest.skip("malloc is not counted under sanitizers")
    assert out == {"transport": "1", "mallocs": "0", "out": str(select.POLLOUT), "in": "0",
                   "select": "1"}, out


# select() over an upgraded fd and more descriptors than its stack buffer holds (64): the
# pollfd array goes to the heap and every answer is still right.
MANY_SELECT_SCRIPT = r'''
import json, os, select, psycopg

conn = psycopg.connect("", autocommit=True)
sock = conn.pgconn.socket
pipes = [os.pipe() for _ in range(100)]
os.write(pipes[57][1], b"x")
readers = [r for r, _ in pipes]
readable, writable, _ = select.select(readers + [sock], [sock], [], 5)
print(json.dumps({"transport": __import__("ctypes").CDLL(None).l5pg_fd_transport(sock),
                  "readable": [readers.index(r) for r in readable if r in readers],
                  "sock_readable": sock in readable, "sock_writable": sock in writable,
                  "row": conn.execute("select 3").fetchone()[0]}))
'''


@pytest.mark.timeout(60)
def test_select_over_many_descriptors(l5pgd, shim):
    out, _ = run_python_json(shm_target(l5pgd), MANY_SELECT_SCRIPT)
    assert out == {"transport": 1, "readable": [57], "sock_readable": False,
                   "sock_writable": True, "row": 3}, out


# select() with nfds beyond FD_SETSIZE, on sets the program sized itself (the kernel reads
# nfds bits of each): the descriptors above 1024 are waited for and reported as the kernel
# does, beside an upgraded one. Before, the shim looked at 1024 bits only and left the bits
# above as they came in, reported ready.
BIG_SELECT_SCRIPT = r'''
import ctypes, json, os, resource, psycopg

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048), max(hard, 2048)))
conn = psycopg.connect("", autocommit=True)
sock = conn.pgconn.socket
ready_r, ready_w = os.pipe()
idle_r, idle_w = os.pipe()
os.dup2(ready_r, 1500)
os.dup2(idle_r, 1600)
os.write(ready_w, b"x")
Set = ctypes.c_ulong * (2048 // (8 * ctypes.sizeof(ctypes.c_ulong)))
bits = 8 * ctypes.sizeof(ctypes.c_ulong)
def make(*fds):
    s = Set()
    for fd in fds:
        s[fd // bits] |= 1 << (fd % bits)
    return s
def has(s, fd):
    return bool(s[fd // bits] >> (fd % bits) & 1)
rd, wr = make(sock, 1500, 1600), make(sock)
libc = ctypes.CDLL(None, use_errno=True)
class Timeval(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("usec", ctypes.c_long)]
rc = libc.select(1601, ctypes.byref(rd), ctypes.byref(wr), None,
                 ctypes.byref(Timeval(2, 0)))
print(json.dumps({"transport": libc.l5pg_fd_transport(sock), "rc": rc,
                  "read": [fd for fd in (sock, 1500, 1600) if has(rd, fd)],
                  "write": [fd for fd in (sock,) if has(wr, fd)] == [sock],
                  "row": conn.execute("select 3").fetchone()[0]}))
'''


@pytest.mark.timeout(60)
def test_select_beyond_fd_setsize(l5pgd, shim):
    out, _ = run_python_json(shm_target(l5pgd), BIG_SELECT_SCRIPT)
    assert out == {"transport": 1, "rc": 2, "read": [1500], "write": True, "row": 3}, out


# select(nfds = the descriptor limit) on glibc's own 1024-bit sets, as programs that pass
# getdtablesize() do, with a limit of a million descriptors: the shim reads no more of the
# sets than the kernel does (up to the highest descriptor open), so sets that end at an
# unmapped page are fine.
HUGE_NFDS_SCRIPT = r'''
import ctypes, json, mmap, resource, psycopg

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
conn = psycopg.connect("", autocommit=True)
sock = conn.pgconn.socket
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
def set_before_a_guard_page():
    page = mmap.PAGESIZE
    base = libc.mmap(None, 2 * page, mmap.PROT_READ | mmap.PROT_WRITE,
                     mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    assert libc.mprotect(base + page, page, 0) == 0  # PROT_NONE
    return (ctypes.c_ulong * (1024 // (8 * ctypes.sizeof(ctypes.c_ulong)))).from_address(
        base + page - 128)
bits = 8 * ctypes.sizeof(ctypes.c_ulong)
rd, wr = set_before_a_guard_page(), set_before_a_guard_page()
rd[sock // bits] |= 1 << (sock % bits)
wr[sock // bits] |= 1 << (sock % bits)
class Timeval(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("usec", ctypes.c_long)]
rc = libc.select(hard, ctypes.byref(rd), ctypes.byref(wr), None, ctypes.byref(Timeval(1, 0)))
print(json.dumps({"transport": libc.l5pg_fd_transport(sock), "nfds_over_1024": hard > 1024,
                  "rc": rc, "readable": bool(rd[sock // bits] >> (sock % bits) & 1),
                  "writable": bool(wr[sock // bits] >> (sock % bits) & 1),
                  "row": conn.execute("select 3").fetchone()[0]}))
'''


@pytest.mark.timeout(60)
def test_select_with_nfds_at_the_descriptor_limit(l5pgd, shim):
    out, _ = run_python_json(shm_target(l5pgd), HUGE_NFDS_SCRIPT)
    if not out["nfds_over_1024"]:
        pytest.skip("the hard descriptor limit here is 1024")
    assert out == {"transport": 1, "nfds_over_1024": True, "rc": 1, "readable": False,
                   "writable": True, "row": 3}, out


# dup2() onto an upgraded descriptor closes it as close() does: l5pgd learns of a clean
# close (the segment's closed flag before the socket's EOF), not of a client that vanished.
DUP2_OVER_SCRIPT = r'''
import ctypes, json, os, psycopg
conn = psycopg.connect("", autocommit=True, application_name="l5pg-dup2-over")
sock = conn.pgconn.socket
transport = ctypes.CDLL(None).l5pg_fd_transport(sock)
r, w = os.pipe()
os.dup2(r, sock)
os.write(w, b"p")
print(json.dumps({"transport": transport, "after": ctypes.CDLL(None).l5pg_fd_transport(sock),
                  "read": os.read(sock, 1).decode()}))
'''


@pytest.mark.timeout(60)
def test_dup2_onto_an_upgraded_fd_closes_it_cleanly(l5pgd, shim):
    log0 = len(l5pgd.log_text())
    out, _ = run_python_json(shm_target(l5pgd), DUP2_OVER_SCRIPT)
    assert out == {"transport": 1, "after": 0, "read": "p"}, out
    wait_for(lambda: "closing: " in l5pgd.log_text()[log0:], 10, "the session's close")
    # Before: "client socket error: Connection reset by peer" (the EOF came first).
    closing = [line for line in l5pgd.log_text()[log0:].splitlines() if "closing: " in line]
    assert closing[0].endswith("closing: client closed the connection"), closing


# os.closerange() calls close_range(): the upgraded connection is closed as close() closes
# it (l5pgd sees the session end), and the fd number, handed out again for a pipe, is a
# plain pipe, not the old connection.
CLOSE_RANGE_SCRIPT = r'''
import ctypes, json, os, psycopg

shim = ctypes.CDLL(None)
conn = psycopg.connect("", autocommit=True)
sock = conn.pgconn.socket
before = shim.l5pg_fd_transport(sock)
os.closerange(sock, sock + 1)
ends = []
while sock not in ends and len(ends) < 64:  # the lowest free numbers come first
    ends.extend(os.pipe())
r, w = (sock, ends[ends.index(sock) + 1]) if ends.index(sock) % 2 == 0 else \
       (ends[ends.index(sock) - 1], sock)
os.write(w, b"through the pipe")
print(json.dumps({"before": before, "after": shim.l5pg_fd_transport(sock),
                  "read": os.read(r, 64).decode()}))
os._exit(0)  # psycopg would close the number again
'''


@pytest.mark.timeout(60)
def test_close_range_closes_the_connection_as_close_does(l5pgd, shim):
    from tests.harness.waiting import wait_for
    out, _ = run_python_json(shm_target(l5pgd), CLOSE_RANGE_SCRIPT)
    assert out == {"before": 1, "after": 0, "read": "through the pipe"}, out
    wait_for(lambda: l5pgd.metric("l5pg_sessions_active", transport="shm") == 0, 15,
             "l5pgd saw the session end")


# Python's subprocess closes the child's descriptors with close_range() in a vfork() child:
# the parent keeps its connection. closefrom() in a forked child closes as close() does.
SPAWN_AND_CLOSEFROM_SCRIPT = r'''
import ctypes, json, os, subprocess, psycopg

libc = ctypes.CDLL(None, use_errno=True)
conn = psycopg.connect("", autocommit=True)
sock = conn.pgconn.socket
spawned = subprocess.run(["true"], close_fds=True).returncode
after_spawn = conn.execute("select 11").fetchone()[0]
pid = os.fork()
if pid == 0:
    libc.closefrom(sock)
    ends = []
    while sock not in ends and len(ends) < 64:
        ends.extend(os.pipe())
    i = ends.index(sock)
    r, w = (sock, ends[i + 1]) if i % 2 == 0 else (ends[i - 1], sock)
    os.write(w, b"ok")
    os._exit(0 if os.read(r, 2) == b"ok" else 1)
_, status = os.waitpid(pid, 0)
print(json.dumps({"spawned": spawned, "after_spawn": after_spawn,
                  "child_exit": os.waitstatus_to_exitcode(status),
                  "parent_row": conn.execute("select 12").fetchone()[0],
                  "transport": ctypes.CDLL(None).l5pg_fd_transport(sock)}))
'''


@pytest.mark.timeout(60)
def test_spawn_and_closefrom_leave_each_process_its_descriptors(l5pgd, shim):
    out, _ = run_python_json(shm_target(l5pgd), SPAWN_AND_CLOSEFROM_SCRIPT)
    assert out == {"spawned": 0, "after_spawn": 11, "child_exit": 0, "parent_row": 12,
                   "transport": 1}, out


# A socket duplicated (socket.dup(), socket.fromfd()) before its first message: were only
# the descriptor that sends first upgraded, the other would read the bare socket. Both stay
# plain sockets, and the session works through either.
DUP_BEFORE_FIRST_MESSAGE_SCRIPT = r'''
import ctypes, json, socket, sys
sys.path.insert(0, sys.argv[2])
from tests.harness import pgwire

shim = ctypes.CDLL(None)
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(sys.argv[1])
copy = s.dup()
s.sendall(pgwire.startup_packet(application_name="l5pg-dup"))
msgs = pgwire.read_until_ready(copy)
rows = [b for t, b in pgwire.query(copy, "select 6*7") if t == "D"]
print(json.dumps({"transports": [shim.l5pg_fd_transport(s.fileno()),
                                 shim.l5pg_fd_transport(copy.fileno())],
                  "ready": msgs[-1][0], "row": rows[0][-2:].decode()}))
'''


@pytest.mark.timeout(60)
def test_socket_duplicated_before_its_first_message_stays_a_socket(l5pgd, shim):
    out, _ = run_python_json(shm_target(l5pgd), DUP_BEFORE_FIRST_MESSAGE_SCRIPT,
                             args=[str(l5pgd.socket_path), str(paths.REPO)])
    assert out == {"transports": [0, 0], "ready": "Z", "row": "42"}, out


# A socket duplicated while its first message is asking l5pgd for the upgrade: l5pgd is held
# stopped until the upgrade request waits in the socket (SIOCOUTQ) and the dup() sleeps
# waiting for the outcome (the main thread in nanosleep, /proc/.../syscall), then both
# descriptors share the rings. The shim used to make both plain sockets under the upgrading
# thread, whose send then failed with EBADF on a socket l5pgd had moved onto the rings.
DUP_DURING_UPGRADE_SCRIPT = r'''
import ctypes, fcntl, json, os, platform, signal, socket, struct, sys, termios, threading, time
sys.path.insert(0, sys.argv[3])
from tests.harness import pgwire

# nanosleep, clock_nanosleep
SLEEPS = {"x86_64": {35, 230}, "aarch64": {101, 115}}[platform.machine()]

def eventually(condition, seconds=10):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)
    return condition()

def queued(sock):
    return struct.unpack("i", fcntl.ioctl(sock, termios.TIOCOUTQ, b"\0" * 4))[0]

def sleeping(tid):
    with open(f"/proc/self/task/{tid}/syscall") as f:
        first = f.read().split()[0]  # "running" while on a CPU or runnable
    return first.isdigit() and int(first) in SLEEPS

shim = ctypes.CDLL(None)
l5pgd = int(sys.argv[2])
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(sys.argv[1])
failure = []

def first_send():
    try:
        s.sendall(pgwire.startup_packet(application_name="l5pg-dup-upgrading"))
    except OSError as e:
        failure.append(os.strerror(e.errno))

def resume_when_dup_waits(main_tid):
    eventually(lambda: sleeping(main_tid), 5)  # without the wait: after 5 s, to fail
    os.kill(l5pgd, signal.SIGCONT)

os.kill(l5pgd, signal.SIGSTOP)
sender = threading.Thread(target=first_send)
sender.start()
assert eventually(lambda: queued(s) > 0), "no upgrade request"
threading.Thread(target=resume_when_dup_waits, args=(threading.get_native_id(),)).start()
copy = s.dup()
sender.join(10)
msgs = pgwire.read_until_ready(copy) if not failure else [("?", b"")]
rows = [b for t, b in pgwire.query(s, "select 6*7") if t == "D"] if not failure else [b"--"]
print(json.dumps({"send": failure, "transports": [shim.l5pg_fd_transport(s.fileno()),
                                                  shim.l5pg_fd_transport(copy.fileno())],
                  "ready": msgs[-1][0], "row": rows[0][-2:].decode()}))
'''


@pytest.mark.timeout(60)
def test_socket_duplicated_during_its_upgrade_shares_the_rings(l5pgd, shim):
    try:
        # An upgrade timeout far beyond the script's 5 s fallback: without the wait in dup(),
        # the upgrade still succeeds, after the dup() (the failure this test is for).
        out, _ = run_python_json(shm_target(l5pgd), DUP_DURING_UPGRADE_SCRIPT,
                                 args=[str(l5pgd.socket_path), str(l5pgd.pid()), str(paths.REPO)],
                                 env={"L5PG_UPGRADE_TIMEOUT_MS": "30000"})
    finally:
        os.kill(l5pgd.pid(), signal.SIGCONT)
    assert out == {"send": [], "transports": [1, 1], "ready": "Z", "row": "42"}, out


# A psycopg connection whose backend terminated itself, polled until it hangs up (5 s at
# most): `revents` is the last poll()'s answer.
TERMINATED_CONNECTION = r'''
conn = psycopg.connect("", autocommit=True)
pg = conn.pgconn
pg.send_query(b"select pg_terminate_backend(pg_backend_pid())")
while pg.flush():
    pass
p = select.poll()
p.register(pg.socket, select.POLLIN)
deadline = time.monotonic() + 5
revents = 0
while time.monotonic() < deadline and not revents & select.POLLHUP:
    revents = dict(p.poll(100)).get(pg.socket, 0)
'''

# Postgres ends the session after a last message the client has not read yet: a Unix socket
# then polls POLLIN | POLLHUP, and so must the upgraded connection (held against Postgres's
# own socket). Asked for writing alone it is writable as well (a write fails at once), so
# select() with only a write set reports it at once: held here because the shim's select()
# would return 0 before its timeout if a channel ever said POLLHUP without POLLOUT.
HANGUP_WITH_DATA_SCRIPT = r'''
import ctypes, json, os, select, time, psycopg
''' + TERMINATED_CONNECTION + r'''
transport = getattr(ctypes.CDLL(None), "l5pg_fd_transport", lambda fd: 0)  # direct: no shim
w = select.poll()
w.register(pg.socket, select.POLLOUT)
out_revents = dict(w.poll(0)).get(pg.socket, 0)
writable = select.select([], [pg.socket], [], 0.3)[1] == [pg.socket]
print(json.dumps({"transport": transport(pg.socket), "revents": revents,
                  "out_revents": out_revents, "select_writable": writable,
                  "unread": len(os.read(pg.socket, 65536)) > 0}))
'''


@pytest.mark.timeout(60)
def test_poll_reports_hangup_beside_unread_data(l5pgd, cluster, shim):
    import select
    via_shm, _ = run_python_json(shm_target(l5pgd), HANGUP_WITH_DATA_SCRIPT)
    direct, _ = run_python_json(direct_unix_target(cluster), HANGUP_WITH_DATA_SCRIPT)
    assert direct == {"transport": 0, "revents": select.POLLIN | select.POLLHUP,
                      "out_revents": select.POLLOUT | select.POLLHUP,
                      "select_writable": True, "unread": True}, direct
    assert via_shm == dict(direct, transport=1), via_shm


# SO_RCVTIMEO on a blocking socket bounds each blocking recv(): EAGAIN once it passed with
# nothing read, as on a socketpair. (The upgraded socket is a blocking Python socket that
# speaks the protocol itself: libpq's sockets are non-blocking.)
RCVTIMEO_SCRIPT = r'''
import ctypes, errno, json, socket, struct, sys, time
sys.path.insert(0, sys.argv[2])
from tests.harness import pgwire

TIMEOUT = struct.pack("ll", 0, 200_000)  # 0.2 s

def timed_out_recv(s):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, TIMEOUT)
    started = time.monotonic()
    try:
        return ["data", len(s.recv(100))]
    except OSError as e:
        return [errno.errorcode[e.errno], time.monotonic() - started < 0.7]

s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(pgwire.startup_packet(application_name="l5pg-rcvtimeo"))
pgwire.read_until_ready(s)
sql = b"select pg_sleep(1.5)\0"
s.sendall(b"Q" + struct.pack("!I", 4 + len(sql)) + sql)
a, b = socket.socketpair()
print(json.dumps({"transport": ctypes.CDLL(None).l5pg_fd_transport(s.fileno()),
                  "shim": timed_out_recv(s), "socket": timed_out_recv(a)}))
'''


# Spinning for up to a second (L5PG_SPIN_US) does not outlast the timeout: the EAGAIN comes
# well before the answer (the shim's used to come after the spin, 1 s).
@pytest.mark.timeout(60)
@pytest.mark.parametrize("spin_us", ["50", "1000000"])
def test_receive_timeout_of_a_blocking_socket_holds(l5pgd, shim, spin_us):
    out, _ = run_python_json(shm_target(l5pgd), RCVTIMEO_SCRIPT,
                             args=[str(l5pgd.socket_path), str(paths.REPO)],
                             env={"L5PG_SPIN_US": spin_us})
    assert out == {"transport": 1, "shim": ["EAGAIN", True], "socket": ["EAGAIN", True]}, out


# A socket asked for exceptions alone that hangs up has nothing select() reports: the kernel's
# select() sleeps on until the timeout and leaves no time in it. The shim's poll() underneath
# reports the hang-up whatever was asked, and its select() used to return 0 at once.
EXCEPTION_ONLY_SELECT_SCRIPT = r'''
import ctypes, json, select, socket, time, psycopg

libc = ctypes.CDLL(None, use_errno=True)

class Timeval(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("usec", ctypes.c_long)]

def exception_only_select(fd):
    fds = (ctypes.c_ulong * 16)()
    fds[fd // 64] |= 1 << (fd % 64)
    tv = Timeval(0, 300_000)
    rc = libc.select(fd + 1, None, None, fds, ctypes.byref(tv))
    return [rc, tv.sec, tv.usec, bool(fds[fd // 64] & (1 << (fd % 64)))]
''' + TERMINATED_CONNECTION + r'''
a, b = socket.socketpair()
b.close()
print(json.dumps({"transport": ctypes.CDLL(None).l5pg_fd_transport(pg.socket),
                  "hung_up": bool(revents & select.POLLHUP),
                  "shim": exception_only_select(pg.socket),
                  "socket": exception_only_select(a.fileno())}))
'''


@pytest.mark.timeout(60)
def test_select_for_exceptions_alone_waits_out_a_hangup(l5pgd, shim):
    out, _ = run_python_json(shm_target(l5pgd), EXCEPTION_ONLY_SELECT_SCRIPT)
    assert out["socket"] == [0, 0, 0, False], out
    assert out == {"transport": 1, "hung_up": True, "shim": out["socket"],
                   "socket": out["socket"]}, out

# MSG_OOB, MSG_ERRQUEUE and an address on an upgraded connection: the answers a plain AF_UNIX
# socket gives with nothing of the kind pending, never the stream's bytes (the shim used to
# hand out the answer to recv(MSG_OOB) and recv(MSG_ERRQUEUE)). Two answers differ by
# design: the rings carry no urgent data (EOPNOTSUPP), and the error queue is empty where
# AF_UNIX would read the stream. A null buffer is EFAULT, as the kernel's copy fails (the
# shim's crashed the program), and nothing is read.
@pytest.mark.timeout(60)
def test_flags_the_rings_cannot_carry_get_the_kernels_answers(l5pgd, shim):
    out, _ = run_python_json(shm_target(l5pgd), socket_flags.SCRIPT,
                             args=["unix", str(l5pgd.socket_path), str(paths.REPO)])
    assert out["transport"] == 1, out  # L5PG_TRANSPORT_SHM
    assert out["socket"]["sendto_addr"] == ["EISCONN"], out
    assert out["socket"]["trunc"] == [5, "54"], out  # AF_UNIX copies despite MSG_TRUNC
    assert out["socket"]["null_send"] == out["socket"]["null_recv"] == ["EFAULT"], out
    assert out["socket"]["big_trunc"] == ["EFAULT", 600000, "43"], out
    assert out["idle"]["socket"] == {"poll_null": ["EFAULT"], "recvfrom_fail": ["EAGAIN", 77],
                                     "recvmsg_fail": ["EAGAIN", 7, 99]}, out
    assert out["idle"]["shim"] == out["idle"]["socket"], out
    # (Python names EOPNOTSUPP by its Linux alias ENOTSUP; the kernel's AF_UNIX before 5.15
    # has no urgent data and answers recv(MSG_OOB) so, the shim as a 5.15's with none pending.)
    assert out["socket"]["oob_recv"] in (["EINVAL"], ["ENOTSUP"]), out
    assert out["shim"] == dict(out["socket"], oob_recv=["EINVAL"], oob_send=["ENOTSUP"],
                               errqueue=["EAGAIN"]), out


# ioctl(FIONREAD) counts what recv() would return, as on the socket: the ring's bytes, not the
# doorbell bytes the kernel has queued on the socket (clientlib/interpose_fd.cpp). Java's
# InputStream.available() is this call, and pgjdbc reads a notification when it says that
# bytes are there. With an epoll set watching, l5pgd rings for each answer.
@pytest.mark.timeout(60)
@pytest.mark.parametrize("waiter", ["poll", "epoll"])
def test_fionread_counts_what_recv_would_return(l5pgd, cluster, shim, waiter):
    socket_path = str(cluster.socket_dir / f".s.PGSQL.{cluster.port}")
    direct, _ = run_python_json(direct_unix_target(cluster), fionread.SCRIPT,
                                args=["unix", socket_path, str(paths.REPO), waiter])
    via_shm, _ = run_python_json(shm_target(l5pgd), fionread.SCRIPT,
                                 args=["unix", str(l5pgd.socket_path), str(paths.REPO), waiter])
    for out, transport in ((direct, 0), (via_shm, 1)):  # 1: L5PG_TRANSPORT_SHM
        counted, peeked = out["whole"]
        assert out["transport"] == transport and out["idle"] == 0 and out["after"] == 0, out
        assert 0 < out["first"] <= peeked and counted == peeked == out["got"] > 3000, out
