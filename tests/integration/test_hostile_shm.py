"""l5pgd against a hand-driven (pure-Python) L5 SHM client: the well-behaved path, hostile
ring writers and readers, and upgrade requests it must decline."""
import contextlib
import os
import signal
import struct
import time
import uuid
from pathlib import Path

import psycopg2
import pytest

from tests.harness import l5wire, pgwire
from tests.harness.client import tcp_target
from tests.harness.l5wire import OFF_S2C, RC_READ_POS, ShmClient, max_record_payload
from tests.harness.waiting import wait_for

RING = 4096  # small rings keep every test far from wrapping issues and make limits cheap


def app_name(tag):
    return f"l5wire-{tag}-{uuid.uuid4().hex[:8]}"


def backends(cluster, appname):
    return int(cluster.sql(
        f"select count(*) from pg_stat_activity where application_name = '{appname}'"))


def wait_no_backend(cluster, appname, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        n = backends(cluster, appname)
        if n == 0:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def started_client(l5pgd, appname, c2s=RING, s2c=RING):
    c = ShmClient(l5pgd.socket_path, c2s=c2s, s2c=s2c)
    assert c.upgrade() == b"L", "l5pgd declined a valid upgrade"
    msgs = c.startup(application_name=appname)
    types = [t for t, _ in msgs]
    assert types[0] == "R" and struct.unpack("!I", msgs[0][1][:4])[0] == 0, msgs[:3]
    assert types[-1] == "Z", types
    return c


@pytest.fixture
def bystander(l5pgd):
    """A plain (no shim) psycopg2 session through l5pgd over TCP, opened before the attack."""
    conn = psycopg2.connect(tcp_target(l5pgd).dsn(application_name="l5wire-bystander"),
                            connect_timeout=5)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("select 1")
        assert cur.fetchone() == (1,)
    yield conn
    conn.close()


# ---------------------------------------------------------------- 1. well-behaved client

@pytest.mark.timeout(60)
@pytest.mark.parametrize("rings", [(RING, RING), (64 * 1024, 64 * 1024)], ids=["4k", "64k"])
def test_python_shm_client_select_42(l5pgd, cluster, rings):
    s0 = l5pgd.metric("l5pg_sessions_total", transport="shm")
    a0 = l5pgd.metric("l5pg_upgrades_total", result="accepted")
    appname = app_name("good")
    c = started_client(l5pgd, appname, *rings)
    try:
        msgs = c.query("SELECT 42")
        data = [b for t, b in msgs if t == "D"]
        assert len(data) == 1 and data[0].endswith(b"42"), msgs
        assert backends(cluster, appname) == 1
        # Several round trips, enough bytes to wrap a 4 KiB ring more than once.
        for i in range(20):
            msgs = c.query(f"SELECT repeat('x', 1000) || '{i}'")
            data = [b for t, b in msgs if t == "D"]
            assert len(data) == 1 and data[0].endswith(b"x" * 1000 + str(i).encode()), msgs
        print(f"doorbells sent {c.doorbells_sent}, received {c.doorbells_received}, "
              f"fallback nudges {c.nudges}")
    finally:
        c.close()
    assert l5pgd.metric("l5pg_sessions_total", transport="shm") > s0
    assert l5pgd.metric("l5pg_upgrades_total", result="accepted") > a0
    assert wait_no_backend(cluster, appname), "backend left after a clean Terminate"
    assert l5pgd.alive()


# ---------------------------------------------------------------- 2. hostile writers

# The length word of a record is its publication flag: 0 = nothing published yet (not an
# attack), otherwise it must be 1..size/2-4. Anything above is corrupt, and l5pgd must say
# so before it touches [record, record + footprint).

def attack_length_just_above_max(c):
    c.write_record_raw(max_record_payload(c.c2s_size) + 1, ring=False)


def attack_length_above_half(c):
    c.write_record_raw(c.c2s_size // 2 + 8, ring=False)


def attack_length_all_ones(c):
    c.write_record_raw(0xFFFFFFFF, ring=False)


def attack_corrupt_length_after_valid_record(c):
    # An honest record (the start of a Query message that never completes, so nothing
    # reaches the backend), then a corrupt length in the next record slot, which the
    # honest record's publication had zeroed.
    c.write_record_raw(4, b"Q\0\0\0", ring=False)
    c.write_record_raw(0x7FFFFFFF, ring=False)


HOSTILE_WRITERS = {
    "record_length_just_above_max": attack_length_just_above_max,
    "record_length_above_half": attack_length_above_half,
    "record_length_all_ones": attack_length_all_ones,
    "corrupt_length_after_valid_record": attack_corrupt_length_after_valid_record,
}


def assert_session_killed(l5pgd, cluster, c, appname, bystander, errors_before):
    # Wakes l5pgd should it sleep; it may also have killed the session already (the
    # doorbell then fails), which wait_eof() sees as well.
    c.doorbell()
    assert c.wait_eof(5.0), "l5pgd did not close the hostile session within 5 s"
    assert l5pgd.alive(), f"l5pgd died\n{l5pgd.log_tail()}"
    deadline = time.monotonic() + 5
    while l5pgd.metric("l5pg_session_errors_total", transport="shm") <= errors_before:
        assert time.monotonic() < deadline, "l5pg_session_errors_total{transport=shm} did not grow"
        time.sleep(0.05)
    with bystander.cursor() as cur:
        cur.execute("select 'still here', pg_backend_pid() > 0")
        assert cur.fetchone() == ("still here", True)
    assert wait_no_backend(cluster, appname, 10.0), \
        f"backend of the killed session {appname} is still in pg_stat_activity"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("attack", list(HOSTILE_WRITERS), ids=list(HOSTILE_WRITERS))
def test_hostile_writer(l5pgd, cluster, bystander, attack):
    appname = app_name(attack)
    c = started_client(l5pgd, appname)
    try:
        # The session really works before the attack.
        msgs = c.query("select 7")
        assert [b for t, b in msgs if t == "D"][0].endswith(b"7")
        assert backends(cluster, appname) == 1
        e0 = l5pgd.metric("l5pg_session_errors_total", transport="shm")
        log0 = len(l5pgd.log_text())
        HOSTILE_WRITERS[attack](c)
        assert_session_killed(l5pgd, cluster, c, appname, bystander, e0)
        assert "shm protocol violation in the client->server ring" in l5pgd.log_text()[log0:]
    finally:
        c.close(clean=False)


@pytest.mark.timeout(60)
def test_unpublished_record_and_spurious_doorbells_are_harmless(l5pgd, cluster):
    """A zero length word means "nothing published yet": payload bytes sitting behind it
    and doorbells without data must neither kill the session nor be delivered."""
    appname = app_name("unpublished")
    c = started_client(l5pgd, appname)
    try:
        e0 = l5pgd.metric("l5pg_session_errors_total", transport="shm")
        # Garbage where the next record will go, its length word left at 0.
        garbage = b"\xff" * 64
        c.ring_write(c.c2s_base, c.c2s_size, c.c2s_write + 4, garbage)
        for _ in range(3):
            assert c.doorbell()
        # The next honest record overwrites the garbage; the session works as before. Its
        # answer also proves l5pgd has handled the doorbells (they came first).
        msgs = c.query("select 8")
        assert [b for t, b in msgs if t == "D"][0].endswith(b"8"), msgs
        c.drain_socket()
        assert not c.eof, "l5pgd closed the session over an unpublished record"
        assert backends(cluster, appname) == 1
        assert l5pgd.metric("l5pg_session_errors_total", transport="shm") == e0
    finally:
        c.close()
    assert wait_no_backend(cluster, appname), "backend left after a clean Terminate"
    assert l5pgd.alive()


# ---------------------------------------------------------------- 4. hostile reader

@pytest.mark.timeout(60)
def test_hostile_reader_read_pos_beyond_write_pos(l5pgd, cluster, bystander):
    appname = app_name("reader")
    c = started_client(l5pgd, appname)
    try:
        msgs = c.query("select 7")
        assert [b for t, b in msgs if t == "D"][0].endswith(b"7")
        e0 = l5pgd.metric("l5pg_session_errors_total", transport="shm")
        log0 = len(l5pgd.log_text())
        # The server's write position is private now, but it is at most one ring ahead
        # of what we consumed: this is far beyond anything it will ever have written
        # (and record-aligned, as s2c_read is).
        c.poke64(OFF_S2C + RC_READ_POS, c.s2c_read + (1 << 40))
        # A response larger than half the ring forces the server to re-read read_pos.
        body = b"select repeat('y', 20000)\0"
        c.write_bytes(b"Q" + struct.pack("!I", len(body) + 4) + body)
        assert_session_killed(l5pgd, cluster, c, appname, bystander, e0)
        assert ("impossible read position in the server->client ring"
                in l5pgd.log_text()[log0:])
    finally:
        c.close(clean=False)


@pytest.mark.timeout(60)
def test_hostile_reader_read_pos_beyond_write_pos_while_full(l5pgd, cluster, bystander):
    """The ring towards the client is full and l5pgd waits for room when the client makes its
    read position impossible and rings: the session is closed with the reason, as when
    l5pgd finds it writing. (It waited for room that never came, and said nothing.)"""
    appname = app_name("reader-full")
    c = started_client(l5pgd, appname)
    try:
        e0 = l5pgd.metric("l5pg_session_errors_total", transport="shm")
        log0 = len(l5pgd.log_text())
        body = f"select repeat('y', {8 * RING})\0".encode()
        c.write_bytes(b"Q" + struct.pack("!I", len(body) + 4) + body)
        time.sleep(1)  # the answer fills the ring; nothing is read
        c.poke64(OFF_S2C + RC_READ_POS, c.s2c_read + (1 << 40))
        assert_session_killed(l5pgd, cluster, c, appname, bystander, e0)
        assert ("impossible read position in the server->client ring"
                in l5pgd.log_text()[log0:])
    finally:
        c.close(clean=False)


# ---------------------------------------------------------------- 3. refused upgrades

def _unsealed(tmp_path):
    return RING, RING, l5wire.make_memfd(RING, RING, seal=False)


def _unallocated(tmp_path):
    # Pages l5pgd would be the first to touch, and be charged for in its memory cgroup.
    return RING, RING, l5wire.make_memfd(RING, RING, allocate=False)


def _sealed_by_client(tmp_path):
    # F_SEAL_SEAL set by the client: l5pgd could not seal out hole punching.
    return RING, RING, l5wire.make_memfd(RING, RING, extra_seals=l5wire.F_SEAL_SEAL)


def _wrong_size(tmp_path):
    return RING, RING, l5wire.make_memfd(RING, RING, size=4096 + RING + RING + 4096)


def _bad_magic(tmp_path):
    return RING, RING, l5wire.make_memfd(RING, RING, magic=0x1122334455667788)


def _old_layout(tmp_path):
    # A shim from before ring layout 2 (the reader polled write_pos): l5pgd must decline
    # rather than misread its rings; the client then carries on over the socket.
    return RING, RING, l5wire.make_memfd(RING, RING, layout_version=1)


def _not_power_of_two(tmp_path):
    return 5000, RING, l5wire.make_memfd(5000, RING)


def _above_max(tmp_path):
    return 64 << 20, RING, l5wire.make_memfd(64 << 20, RING)


def _no_fd(tmp_path):
    return RING, RING, None


def _regular_file(tmp_path):
    return RING, RING, l5wire.make_regular_file(RING, RING, dir=str(tmp_path))


# What l5pgd logs when it declines (checked where the reason is specific to the case).
REFUSAL_LOG = {"old_layout_version": "unsupported segment layout version",
               "unallocated_memfd": "memfd has pages the client did not allocate",
               "sealed_by_client": "memfd is already sealed against writing or further seals"}

REFUSALS = {
    "unsealed_memfd": _unsealed,
    "unallocated_memfd": _unallocated,
    "sealed_by_client": _sealed_by_client,
    "wrong_size": _wrong_size,
    "bad_magic": _bad_magic,
    "old_layout_version": _old_layout,
    "ring_not_power_of_two": _not_power_of_two,
    "ring_above_max": _above_max,
    "no_fd": _no_fd,
    "regular_file": _regular_file,
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", list(REFUSALS), ids=list(REFUSALS))
def test_upgrade_declined_then_plain_session(l5pgd, tmp_path, case):
    d0 = l5pgd.metric("l5pg_upgrades_total", result="declined")
    log0 = len(l5pgd.log_text())
    c2s, s2c, fd = REFUSALS[case](tmp_path)
    try:
        with l5wire.connect_unix(l5pgd.socket_path) as s:
            answer = l5wire.send_upgrade(s, c2s, s2c, fd)
            assert answer == b"N", f"{case}: expected 'N', got {answer!r}"
            s.sendall(pgwire.startup_packet(application_name=f"l5wire-declined-{case}"))
            msgs = pgwire.read_until_ready(s)
            types = [t for t, _ in msgs]
            assert types[0] == "R" and struct.unpack("!I", msgs[0][1][:4])[0] == 0, msgs[:3]
            assert types[-1] == "Z", types
            msgs = pgwire.query(s, "select 40+2")
            data = [b for t, b in msgs if t == "D"]
            assert len(data) == 1 and data[0].endswith(b"42"), msgs
            pgwire.terminate(s)
    finally:
        if fd is not None:
            os.close(fd)
    assert l5pgd.metric("l5pg_upgrades_total", result="declined") > d0
    if case in REFUSAL_LOG:
        assert REFUSAL_LOG[case] in l5pgd.log_text()[log0:], l5pgd.log_tail()
    assert l5pgd.alive()


# ---------------------------------------------------------------- 5. records without end

@pytest.mark.timeout(90)
def test_records_without_end_do_not_hold_the_worker(workdir, cluster):
    """Two records whose lengths lead to each other (each half the ring), written once: l5pgd
    reads them for ever, as the writer never clears a length word. Here behind a Terminate,
    with the client's ring from l5pgd full (it reads nothing), so that the session stays while
    Postgres is gone and drops what the client sends. It dropped it in one loop: its worker
    never came back, and every other session of that worker waited with it. Now it reads a
    bounded share per turn, and the other sessions of its one worker are served."""
    from tests.harness.l5pgd import L5pgd

    d = L5pgd(workdir / "l5pgd-endless", cluster, workers=1)
    with d:
        c = ShmClient(d.socket_path, c2s=RING, s2c=RING)
        try:
            assert c.upgrade() == b"L"
            appname = app_name("endless")
            c.startup(application_name=appname)
            sql = b"select repeat('x', 100000)\0"
            c.write_bytes(b"Q" + struct.pack("!I", 4 + len(sql)) + sql)
            time.sleep(0.5)  # l5pgd fills the ring, which the client does not read
            terminate = b"X\0\0\0\x04"
            c.write_record_raw(len(terminate), terminate)
            assert wait_no_backend(cluster, appname), "Postgres never got the Terminate"
            # Flush messages ('H') fill each record, should any reach a Postgres. The two
            # records take the whole ring: written once l5pgd consumed all before them.
            half = RING // 2
            payload = (b"H\0\0\0\x04" * half)[:half - 4]
            start = c.c2s_write
            c.ring_write(c.c2s_base, RING, start + 4, payload)
            c.ring_write(c.c2s_base, RING, start + half + 4, payload)
            c.poke32(c.ring_word_off(c.c2s_base, RING, start + half), half - 4)
            c.poke32(c.ring_word_off(c.c2s_base, RING, start), half - 4)
            c.doorbell()
            time.sleep(0.2)
            # Another session of the same (only) worker is served meanwhile.
            r = psql_on(d, "select 'served'")
            assert r.returncode == 0 and r.stdout.strip() == "served", r.stderr
            assert d.alive()
        finally:
            c.close(clean=False)
        # The hostile session ends when its client leaves.
        wait_for(lambda: d.metric("l5pg_sessions_active", transport="shm") == 0, 15,
                 "the hostile session to end once its client left")


def psql_on(d, sql):
    from tests.harness.client import psql_cmd, run, unix_target
    return run(psql_cmd("-c", sql), unix_target(d), check=False, timeout=20)


# ---------------------------------------------------------------- 6. input that must wait

@pytest.mark.timeout(60)
def test_input_that_cannot_go_to_postgres_yet_lets_the_worker_sleep(workdir, cluster):
    """auth.local=passthrough holds a client's bytes until Postgres asks it to authenticate.
    An SHM client that published a query behind its StartupMessage made the worker poll its
    ring without ever blocking, a CPU's worth while Postgres (here a socket that accepts and
    says nothing) took its time; now the worker sleeps until the upstream socket wakes it."""
    import socket
    import tempfile

    from tests.harness.l5pgd import L5pgd
    from tests.harness.ports import free_port
    from tests.harness.procstat import cpu_seconds

    silent_dir = Path(tempfile.mkdtemp(prefix="l5s-", dir=workdir))
    port = free_port()
    silent = socket.socket(socket.AF_UNIX)
    silent.bind(str(silent_dir / f".s.PGSQL.{port}"))
    silent.listen(8)
    d = L5pgd(workdir / "l5pgd-held", cluster, workers=1, upstream_port=port,
              upstream_socket_dir=silent_dir,
              auth_overrides=["auth.local=passthrough", "auth.upstream_authenticates=true"])
    with d, silent:
        c = ShmClient(d.socket_path, c2s=RING, s2c=RING)
        try:
            assert c.upgrade() == b"L"
            packet = pgwire.startup_packet(application_name=app_name("held"))
            sql = b"select 1\0"
            c.write_record_raw(len(packet), packet, ring=False)
            c.write_record_raw(5 + len(sql), b"Q" + struct.pack("!I", 4 + len(sql)) + sql)
            held, _ = silent.accept()
            with held:
                time.sleep(0.5)  # past the worker's spin before it blocks
                before = cpu_seconds(d.pid())
                time.sleep(2)
                used = cpu_seconds(d.pid()) - before
                assert used < 0.5, f"l5pgd used {used:.2f} s of CPU in 2 s, its client waiting"
                assert held.recv(4096, socket.MSG_DONTWAIT)[4:8] == struct.pack("!I", 196608)
        finally:
            c.close(clean=False)


# ---------------------------------------------------------------- 7. descriptors passed

def lingering_socket(stack):
    """A TCP socket whose close would block for minutes: SO_LINGER with data its peer never
    reads. Closing the peer (the ExitStack's end) resets it, so nothing outlives the test.
    Returns the socket and its peer."""
    import socket

    listener = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    s.connect(listener.getsockname())
    peer = stack.enter_context(listener.accept()[0])  # never read
    s.setblocking(False)
    with contextlib.suppress(BlockingIOError):
        while True:
            s.send(b"x" * 4096)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 600))
    return s, peer


def reset_seen(peer, timeout=10):
    """Whether the lingering socket's peer sees it reset (closed with SO_LINGER 0) in time."""
    peer.settimeout(timeout)
    try:
        while peer.recv(1 << 16):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return False  # an orderly close: it lingered


def pass_fd(sock, data, fd_owner, flags=0):
    """Sends `data` with fd_owner's descriptor attached (flags: socket.MSG_OOB, out of band),
    then closes ours: l5pgd holds the last reference."""
    import array
    import socket
    # Not socket.send_fds(), which drops its flags.
    sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                           array.array("i", [fd_owner.fileno()]))], flags)
    fd_owner.close()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("where", ["startup", "query", "out_of_band", "shm_doorbell",
                                   "invalid_length", "behind_a_cancel"])
def test_passed_descriptor_neither_stalls_the_worker_nor_stays_open(workdir, cluster, where):
    """A client may attach descriptors (SCM_RIGHTS) to any bytes on its Unix socket. The
    kernel closes the ones a plain recv() has no room for in the reading thread, and the last
    close of a socket lingering with unsent data waits out its linger time: l5pgd's only
    worker stood still for ten minutes, every other session with it. Now they are closed on a
    thread of their own, reset rather than lingering, and the session that passed them ends.
    So are those l5pgd kept for an upgrade request that never came (a packet of an invalid
    length), and those behind bytes it never read (a cancel request's): closing the socket
    would drop them, so a worker does not close a Unix client's socket either, and the
    closing thread takes what is queued in one before closing it. Descriptors on an
    out-of-band byte (MSG_OOB) were closed by the kernel in the worker's read, which dropped
    that byte: l5pgd reads it inline (SO_OOBINLINE), descriptors and all."""
    from tests.harness.l5pgd import L5pgd

    d = L5pgd(workdir / f"l5pgd-fd-{where}", cluster, workers=1)
    with d, contextlib.ExitStack() as stack:
        log0 = len(d.log_text())
        fd, peer = lingering_socket(stack)
        if where == "behind_a_cancel":
            # Both messages queued before l5pgd reads the first: it reads the cancel
            # request's 16 bytes, refuses its key and closes, the second message unread.
            sock = stack.enter_context(l5wire.connect_unix(d.socket_path))
            os.kill(d.pid(), signal.SIGSTOP)
            try:
                sock.sendall(struct.pack("!IIII", 16, 80877102, 1, 2))
                pass_fd(sock, b"x", fd)
            finally:
                os.kill(d.pid(), signal.SIGCONT)
        elif where == "invalid_length":
            sock = stack.enter_context(l5wire.connect_unix(d.socket_path))
            pass_fd(sock, b"\xff\xff\xff\xff", fd)
        elif where == "shm_doorbell":
            c = ShmClient(d.socket_path, c2s=RING, s2c=RING)
            stack.callback(c.close, clean=False)
            assert c.upgrade() == b"L"
            c.startup(application_name=app_name("fd"))
            pass_fd(c.sock, b"\x01", fd)
            sock = c.sock
        else:
            sock = stack.enter_context(l5wire.connect_unix(d.socket_path))
            packet = pgwire.startup_packet(application_name=app_name("fd"))
            if where == "startup":
                pass_fd(sock, packet, fd)
            else:
                sock.sendall(packet)
                pgwire.read_until_ready(sock)
                if where == "out_of_band":
                    import socket
                    pass_fd(sock, b"Q", fd, socket.MSG_OOB)
                else:
                    pass_fd(sock, b"Q\0\0\0\x0dselect 1\0", fd)
        r = psql_on(d, "select 'served'")
        assert r.returncode == 0 and r.stdout.strip() == "served", r.stderr
        # The session that passed it is closed: its socket reaches EOF.
        sock.settimeout(10)
        with contextlib.suppress(ConnectionResetError):
            while sock.recv(4096):
                pass
        if where in ("startup", "query", "out_of_band", "shm_doorbell"):
            wait_for(lambda: "client passed 1 file descriptor" in d.log_text()[log0:], 10,
                     "l5pgd to log the passed descriptor")
        # Closed, reset rather than lingering, wherever it was (read, or still queued).
        assert reset_seen(peer), "the passed socket was not reset within 10 s"
        assert d.alive()


def socket_holding(kind, stack, workdir, fd):
    """A Unix socket (of `kind`) with `fd` queued in it, behind a message of no bytes where
    there are such; for "listener", a listening socket with a connection waiting whose
    bytes carry it; "stream_out_of_band": on an out-of-band byte; "seqpacket_reset": with an
    error pending, the peer gone with bytes unread. Our ends are closed: the socket returned
    holds the last references."""
    import socket

    if kind == "listener":
        holder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        holder.bind(str(workdir / "holder.sock"))
        holder.listen(1)
        sender = stack.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
        sender.connect(str(workdir / "holder.sock"))
    else:
        types = {"stream": socket.SOCK_STREAM, "stream_out_of_band": socket.SOCK_STREAM,
                 "datagram": socket.SOCK_DGRAM, "seqpacket": socket.SOCK_SEQPACKET,
                 "seqpacket_reset": socket.SOCK_SEQPACKET}
        holder, sender = socket.socketpair(socket.AF_UNIX, types[kind])
        stack.enter_context(sender)
        if types[kind] != socket.SOCK_STREAM:
            sender.send(b"")
    if kind == "seqpacket_reset":
        holder.send(b"never read")
    if kind == "seqpacket":
        # Linux 6.5+: a pidfd of the sender with every message read (SCM_PIDFD), a
        # descriptor l5pgd would leak. l5pgd turns the option off before reading (and
        # would close such a pidfd): the check below sees the first of the two defences.
        # Older kernels refuse the option.
        with contextlib.suppress(OSError):
            holder.setsockopt(socket.SOL_SOCKET, 76, 1)  # SO_PASSPIDFD
    pass_fd(sender, b"x", fd, socket.MSG_OOB if kind == "stream_out_of_band" else 0)
    if kind == "seqpacket_reset":
        sender.close()
    return holder


@pytest.mark.timeout(90)
def test_descriptors_queued_in_a_passed_socket_are_reset_too(workdir, cluster):
    """A socket passed to l5pgd may hold descriptors of its own, queued in it: closing it
    would close them on l5pgd's closing thread as they are, and one lingering would hold that
    thread (and every descriptor queued behind it) for its linger time. The closing thread
    empties a passed Unix socket first, however it is made: a stream (descriptors on an
    out-of-band byte too), datagrams or sequenced packets (where a message may have no bytes,
    and read as an end of the queue; where a pending error, read first, ended the reading),
    or a listening socket with connections waiting (whose bytes may carry descriptors)."""
    from tests.harness.l5pgd import L5pgd

    d = L5pgd(workdir / "l5pgd-nested-fds", cluster, workers=1)
    with d:
        for kind in ("stream", "stream_out_of_band", "datagram", "seqpacket", "seqpacket_reset",
                     "listener"):
            with contextlib.ExitStack() as stack:
                fd, peer = lingering_socket(stack)
                holder = socket_holding(kind, stack, workdir, fd)
                sock = stack.enter_context(l5wire.connect_unix(d.socket_path))
                pass_fd(sock, pgwire.startup_packet(application_name=app_name("fd")), holder)
                assert reset_seen(peer), f"the socket queued in a {kind} was not reset in 10 s"
                with contextlib.suppress(FileNotFoundError):
                    (workdir / "holder.sock").unlink()
        fds = Path(f"/proc/{d.pid()}/fd")
        links = []
        for fd in fds.iterdir():
            with contextlib.suppress(OSError):  # closed meanwhile
                links.append(os.readlink(fd))
        assert not [link for link in links if "pidfd" in link], links
        r = psql_on(d, "select 'served'")
        assert r.returncode == 0 and r.stdout.strip() == "served", r.stderr
