"""l5pgd's client check (auth.*, README "Security model") against a real Postgres set up like a
Debian host: Debian's default pg_hba.conf peer rules, l5pgd running as the `postgres` OS user,
and a second, unprivileged OS account created by this module. Through l5pgd that account may
get exactly what Postgres would give it directly (its own role) plus what l5pgd's ident map
lists, and never role postgres: not over the Unix socket, SHM, TCP or RDMA.

Refusals are checked on the wire (SQLSTATE 28000 in l5pgd's ErrorResponse) and in Postgres's
log: with log_connections on, a refused client must not have started a backend.
"""
import json
import os
import pwd
import re
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness import l5wire, paths, pgwire
from tests.harness.client import shim_debug_lines, shim_preload, upgraded
from tests.harness.cluster import PgCluster
from tests.harness.l5pgd import L5pgd
from tests.harness.rdma import rdma_env, rdma_overrides

REPO = Path(__file__).resolve().parents[2]
ALICE = "l5pg_it_alice"    # OS account and role created here
READER = "l5pg_it_reader"  # a role the ident map lets alice use
OTHER = "l5pg_it_other"    # a role Postgres lets l5pgd's OS user open, but alice may not use
ALICE_PASSWORD = "alice-secret-1"

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="creates an OS account and runs l5pgd as postgres: needs root")

# Debian's default rules, plus a map on the second line so that l5pgd (OS user postgres)
# may open sessions for the roles it admits; every other OS user still maps to itself.
PG_HBA = """\
local   all   postgres                  peer
local   all   all                       peer map=l5pgd
host    all   all        127.0.0.1/32   scram-sha-256
host    all   all        ::1/128        scram-sha-256
"""
PG_IDENT = f"""\
l5pgd   /^(.*)$    \\1
l5pgd   postgres   {ALICE}
l5pgd   postgres   {READER}
l5pgd   postgres   {OTHER}
"""


@pytest.fixture(scope="module")
def alice():
    """The second OS account; removed again if this module created it."""
    created = False
    try:
        pwd.getpwnam(ALICE)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", ALICE],
                       check=True, capture_output=True)
        created = True
    yield pwd.getpwnam(ALICE)
    if created:
        subprocess.run(["userdel", ALICE], capture_output=True)


def sql_as_postgres(cluster, query):
    r = subprocess.run([paths.PSQL, "-X", "-At", "-v", "ON_ERROR_STOP=1", "-c", query],
                       env=cluster.env(), user="postgres", capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.fixture(scope="module")
def peer_cluster(workdir, alice):
    c = PgCluster(workdir / "pg-peer")
    c.init()
    for name, text in (("pg_hba.conf", PG_HBA), ("pg_ident.conf", PG_IDENT)):
        c.write_config_file(name, text)
    c.add_settings("log_connections = on\n")
    try:
        c.start()
        for role in (ALICE, READER, OTHER):
            sql_as_postgres(c, f"create role {role} login")
        sql_as_postgres(c, f"alter role {ALICE} password '{ALICE_PASSWORD}'")
        yield c
    finally:
        c.stop()


def write_ident(path, rules):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{os_user} {role}\n" for os_user, role in rules))
    os.chmod(path, 0o644)
    return path


@pytest.fixture(scope="module")
def guarded(workdir, peer_cluster):
    """l5pgd with its defaults (auth.local=peer, auth.tcp=reject), run as postgres, with an
    ident map that lets root use postgres (the test's own client) and alice use READER."""
    base = workdir / "l5pgd-auth"
    ident = write_ident(base / "ident.map", [("root", "postgres"), (ALICE, READER)])
    d = L5pgd(base, peer_cluster, user="postgres",
              auth_overrides=[f"auth.ident_file={ident}"], extra_overrides=rdma_overrides("soft"))
    d.start()
    yield d
    d.stop()


def backends_started(cluster):
    """Connections Postgres accepted so far (log_connections)."""
    return cluster.log_path.read_text(errors="replace").count("connection received:")


# A raw PG v3 client run as another OS user: prints the outcome of one login as JSON.
PROBE = r"""
import json, socket, sys
sys.path.insert(0, sys.argv[1])
from tests.harness import l5wire, pgwire
kind, where, role = sys.argv[2], sys.argv[3], sys.argv[4]
pairs = [("user", role), ("database", "postgres")]
if len(sys.argv) > 5:  # user=<argv[5]> first, then user=<role>
    pairs.insert(0, ("user", sys.argv[5]))
packet = pgwire.startup_packet_of(pairs)
if kind == "shm":
    client = l5wire.ShmClient(where)
    assert client.upgrade() == b"L", "upgrade declined"
    client.write_bytes(packet)
    msgs, run = client.read_until_ready(), client.query
else:
    if kind == "unix":
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(10)
        s.connect(where)
    else:
        s = pgwire.connect("127.0.0.1", int(where), timeout=10)
    s.sendall(packet)
    msgs, run = pgwire.read_until_ready(s), lambda q: pgwire.query(s, q)
errors = [pgwire.parse_fields(body) for t, body in msgs if t == "E"]
if errors:
    print(json.dumps({"sqlstate": errors[0].get("C"), "message": errors[0].get("M")}))
else:
    rows = [body for t, body in run("select current_user") if t == "D"]
    print(json.dumps({"sqlstate": None, "current_user": rows[0][6:].decode()}))
"""


def probe_as(user, kind, where, role, first_user=None):
    """Logs in as `role` (after a first user=`first_user` in the same packet, if given)."""
    extra = [first_user] if first_user else []
    r = subprocess.run([sys.executable, "-c", PROBE, str(REPO), kind, str(where), role, *extra],
                       user=user, capture_output=True, text=True, timeout=60, cwd="/")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def where(d, kind):
    return d.port if kind == "tcp" else d.socket_path


def psql_as(user, env, role, sql="select current_user", timeout=60):
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("PG", "L5PG_")) and k != "LD_PRELOAD"}
    full.update(HOME="/", PGUSER=role, PGDATABASE="postgres", PGCONNECT_TIMEOUT="10", **env)
    return subprocess.run([paths.PSQL, "-X", "-At", "-c", sql], env=full, user=user,
                          capture_output=True, text=True, timeout=timeout, cwd="/")


def shm_env(d):
    preload, extra = shim_preload()
    return dict(PGHOST=str(d.socket_dir), PGPORT=str(d.port), LD_PRELOAD=preload,
                L5PG_DEBUG="1", **extra)


def test_directly_postgres_refuses_alice_as_postgres(peer_cluster, alice):
    """The yardstick: Debian's peer rule lets alice be alice, never postgres."""
    env = dict(PGHOST=str(peer_cluster.socket_dir), PGPORT=str(peer_cluster.port))
    r = psql_as(ALICE, env, "postgres")
    assert r.returncode != 0 and "Peer authentication failed" in r.stderr, r.stderr
    r = psql_as(ALICE, env, ALICE)
    assert r.returncode == 0 and r.stdout.strip() == ALICE, r.stderr


@pytest.mark.parametrize("kind", ["unix", "shm", "tcp"])
def test_alice_cannot_become_postgres(guarded, peer_cluster, kind):
    before = backends_started(peer_cluster)
    transport = {"unix": "unix", "shm": "shm", "tcp": "tcp"}[kind]
    reason = "rejected" if kind == "tcp" else "peer_mismatch"
    failures = guarded.metric("l5pg_auth_failures_total", transport=transport, reason=reason)
    out = probe_as(ALICE, kind, where(guarded, kind), "postgres")
    assert out["sqlstate"] == "28000", out
    rule = "auth.tcp=reject" if kind == "tcp" else "auth.local=peer"
    assert rule in out["message"], out
    assert backends_started(peer_cluster) == before, "a backend was started for a refused client"
    assert guarded.metric("l5pg_auth_failures_total", transport=transport,
                          reason=reason) == failures + 1
    assert f"uid {alice_uid()}" in guarded.log_text()


@pytest.mark.parametrize("kind", ["unix", "shm"])
def test_alice_cannot_become_postgres_by_naming_herself_first(guarded, peer_cluster, kind):
    """user=alice, then user=postgres in one StartupMessage: Postgres would log in the last
    one, so l5pgd must not admit the packet on the first."""
    before = backends_started(peer_cluster)
    out = probe_as(ALICE, kind, where(guarded, kind), "postgres", first_user=ALICE)
    assert out["sqlstate"] == "08P01", out
    assert 'parameter "user" appears more than once' in out["message"], out
    assert backends_started(peer_cluster) == before, "a backend was started for a refused client"


def send_cancel_request(sock, key):
    """A CancelRequest with `key` (BackendKeyData's 8 bytes); True once the server closed."""
    sock.sendall(struct.pack("!II", 16, 80877102) + key)
    return pgwire.at_eof(sock, 10)


def unix_session(d, **params):
    """A session as role postgres over l5pgd's Unix socket (the ident map lets root use it):
    (socket, its BackendKeyData's 8 bytes)."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(60)
    s.connect(str(d.socket_path))
    s.sendall(pgwire.startup_packet(**params))
    keys = [body[:8] for t, body in pgwire.read_until_ready(s) if t == "K"]
    assert len(keys) == 1
    return s, keys[0]


def test_cancel_request_reaches_postgres_only_with_a_served_key(guarded, peer_cluster):
    """auth.tcp=reject serves nothing over TCP, not even a CancelRequest with a valid key; over
    the Unix socket a key no session of l5pgd holds (the right pid, another secret) is not
    tried on Postgres either. l5pgd closes both without connecting to Postgres. The right
    key over the Unix socket then cancels the query."""
    app = "l5pg-it-tcp-cancel"
    s, key = unix_session(guarded, application_name=app)
    watcher, _ = unix_session(guarded)
    s.sendall(b"Q" + struct.pack("!I", 4 + len("select pg_sleep(60)") + 1)
              + b"select pg_sleep(60)\0")

    def sleeping():
        rows = [b for t, b in pgwire.query(watcher, "select count(*) from pg_stat_activity where "
                                           f"application_name = '{app}' and state = 'active'")
                if t == "D"]
        return rows[0][6:] == b"1"

    deadline = time.monotonic() + 15
    while not sleeping():
        assert time.monotonic() < deadline, "the query never started"
        time.sleep(0.05)
    before = backends_started(peer_cluster)
    assert send_cancel_request(pgwire.connect("127.0.0.1", guarded.port, timeout=10), key)
    time.sleep(0.5)  # a forwarded cancel would have ended the sleep by now
    assert backends_started(peer_cluster) == before, "the TCP cancel reached Postgres"
    assert "cancel request not forwarded: auth.tcp is reject" in guarded.log_text()
    wrong = key[:4] + bytes(b ^ 0x5a for b in key[4:])
    unix = socket.socket(socket.AF_UNIX)
    unix.settimeout(10)
    unix.connect(str(guarded.socket_path))
    assert send_cancel_request(unix, wrong)
    time.sleep(0.5)
    assert backends_started(peer_cluster) == before, "a wrong key was tried on Postgres"
    pid = struct.unpack("!I", wrong[:4])[0]
    assert re.search(r"\[info\] session \d+: cancel request from uid 0 pid \d+ not forwarded: "
                     rf"its key \(process {pid}\) is not one of a session l5pgd serves",
                     guarded.log_text())
    assert guarded.metric("l5pg_cancel_requests_total", result="unknown_key") >= 1
    assert guarded.metric("l5pg_cancel_requests_total", result="rejected") >= 1
    assert sleeping(), "the query was cancelled"
    unix = socket.socket(socket.AF_UNIX)
    unix.settimeout(10)
    unix.connect(str(guarded.socket_path))
    assert send_cancel_request(unix, key)
    errors = [pgwire.parse_fields(body) for t, body in pgwire.read_until_ready(s) if t == "E"]
    assert errors and errors[0].get("C") == "57014", errors
    assert guarded.metric("l5pg_cancel_requests_total", result="forwarded") >= 1
    s.close()
    watcher.close()


def test_wrong_cancel_keys_are_capped_per_peer(workdir, cluster):
    """Postgres forks a process for every CancelRequest; l5pgd refuses a wrong key in
    microseconds, and a 32-bit secret (the process id is in pg_stat_activity) could be
    guessed through it in hours. Over limits.wrong_cancel_keys_per_second_per_peer a peer's
    CancelRequests are dropped without being looked up, a right key too; another peer's
    right key still cancels."""
    app = "l5pg-guess-cap"
    overrides = ["limits.wrong_cancel_keys_per_second_per_peer=1"]
    with L5pgd(workdir / "l5pgd-guesses", cluster, extra_overrides=overrides) as d:
        s, key = unix_session(d, application_name=app)
        watcher, _ = unix_session(d)
        query = "select pg_sleep(60)"
        s.sendall(b"Q" + struct.pack("!I", 4 + len(query) + 1) + query.encode() + b"\0")

        def sleeping():
            rows = [b for t, b in pgwire.query(watcher, "select count(*) from pg_stat_activity "
                                               f"where application_name = '{app}' and "
                                               "state = 'active'") if t == "D"]
            return rows[0][6:] == b"1"

        deadline = time.monotonic() + 15
        while not sleeping():
            assert time.monotonic() < deadline, "the query never started"
            time.sleep(0.05)

        def cancels_over_unix(*keys):
            """All sent before any answer is awaited: they are looked up within
            milliseconds of each other, well within the bucket's second."""
            socks = []
            for k in keys:
                unix = socket.socket(socket.AF_UNIX)
                unix.settimeout(10)
                unix.connect(str(d.socket_path))
                unix.sendall(struct.pack("!II", 16, 80877102) + k)
                socks.append(unix)
            for unix in socks:
                assert pgwire.at_eof(unix, 10)

        def counted(result):
            return d.metric("l5pg_cancel_requests_total", result=result)

        wrong = key[:4] + bytes(b ^ 0x5a for b in key[4:])
        cancels_over_unix(*[wrong] * 5)
        cancels_over_unix(key)  # at once: the same peer's bucket is still empty
        assert counted("unknown_key") + counted("throttled") == 6
        assert counted("throttled") >= 4, "wrong keys were looked up beyond the cap"
        # Looked up, the right key would have been forwarded.
        assert counted("forwarded") == 0 and sleeping(), "a right key was looked up over the cap"
        assert "(limits.wrong_cancel_keys_per_second_per_peer)" in d.log_text()
        assert send_cancel_request(pgwire.connect("127.0.0.1", d.port, timeout=10), key)
        errors = [pgwire.parse_fields(body) for t, body in pgwire.read_until_ready(s) if t == "E"]
        assert errors and errors[0].get("C") == "57014", errors
        assert counted("forwarded") == 1
        s.close()
        watcher.close()


def alice_uid():
    return pwd.getpwnam(ALICE).pw_uid


def test_alice_cannot_become_postgres_with_psql_over_shm(guarded, peer_cluster):
    """The same through the real shim: psql's connection is upgraded, then refused."""
    before = backends_started(peer_cluster)
    r = psql_as(ALICE, shm_env(guarded), "postgres")
    assert r.returncode != 0, r.stdout
    assert upgraded(r.stderr), shim_debug_lines(r.stderr)
    assert "peer authentication failed" in r.stderr and "auth.local=peer" in r.stderr, r.stderr
    assert backends_started(peer_cluster) == before


def test_alice_cannot_become_postgres_over_rdma(guarded, peer_cluster):
    """RDMA clients begin on TCP: under auth.tcp=reject the upgrade is declined before any
    ring is allocated, and the StartupMessage is refused with 28000."""
    before = backends_started(peer_cluster)
    preload, extra = shim_preload()
    env = dict(PGHOST=guarded.host, PGPORT=str(guarded.port), LD_PRELOAD=preload, L5PG_DEBUG="1",
               **rdma_env(guarded, "soft"), **extra)
    r = psql_as(ALICE, env, "postgres")
    assert r.returncode != 0, r.stdout
    assert "auth.tcp=reject" in r.stderr, r.stderr
    assert backends_started(peer_cluster) == before
    assert "RDMA upgrade declined: auth.tcp is reject" in guarded.log_text()


@pytest.mark.parametrize("kind", ["unix", "shm"])
def test_alice_gets_her_own_role(guarded, kind):
    out = probe_as(ALICE, kind, where(guarded, kind), ALICE)
    assert out == {"sqlstate": None, "current_user": ALICE}


def test_os_user_with_a_long_passwd_entry_gets_her_own_role(guarded):
    """glibc's _SC_GETPW_R_SIZE_MAX (1024) is a hint, not a bound: a passwd entry longer than
    that (a directory user's long GECOS) made getpwuid_r() fail with ERANGE, and the client
    was refused as a uid without an OS user name."""
    gecos = pwd.getpwnam(ALICE).pw_gecos
    subprocess.run(["usermod", "-c", "x" * 2000, ALICE], check=True, capture_output=True)
    try:
        out = probe_as(ALICE, "unix", where(guarded, "unix"), ALICE)
        assert out == {"sqlstate": None, "current_user": ALICE}
    finally:
        subprocess.run(["usermod", "-c", gecos, ALICE], check=True, capture_output=True)


def test_alice_gets_her_own_role_with_psql_over_shm(guarded):
    r = psql_as(ALICE, shm_env(guarded), ALICE)
    assert r.returncode == 0 and r.stdout.strip() == ALICE, r.stderr
    assert upgraded(r.stderr)


def test_ident_map_grants_exactly_what_it_lists(guarded, peer_cluster):
    assert probe_as(ALICE, "unix", guarded.socket_path, READER) == {
        "sqlstate": None, "current_user": READER}
    # Postgres would let l5pgd's OS user open OTHER (pg_ident.conf above); l5pgd's map does
    # not list it for alice, so l5pgd refuses.
    before = backends_started(peer_cluster)
    out = probe_as(ALICE, "shm", guarded.socket_path, OTHER)
    assert out["sqlstate"] == "28000", out
    assert backends_started(peer_cluster) == before


def test_passthrough_lets_postgres_authenticate_tcp_clients(workdir, peer_cluster):
    """auth.tcp=passthrough with the upstream over TCP, where Debian's rules ask for SCRAM:
    the exchange passes through l5pgd unchanged; no password, no session."""
    base = workdir / "l5pgd-passthrough"
    d = L5pgd(base, peer_cluster, user="postgres",
              auth_overrides=["auth.tcp=passthrough", "auth.upstream_authenticates=true"],
              extra_overrides=["upstream.host=127.0.0.1"])
    with d:
        env = dict(PGHOST=d.host, PGPORT=str(d.port))
        r = psql_as(ALICE, env, "postgres")
        assert r.returncode != 0 and "password" in r.stderr, r.stderr
        r = psql_as(ALICE, dict(env, PGPASSWORD="wrong"), ALICE)
        assert r.returncode != 0 and "password authentication failed" in r.stderr, r.stderr
        r = psql_as(ALICE, dict(env, PGPASSWORD=ALICE_PASSWORD), ALICE)
        assert r.returncode == 0 and r.stdout.strip() == ALICE, r.stderr


def test_passthrough_never_pools(workdir, peer_cluster, alice):
    """pool.mode=session changes nothing under passthrough: l5pgd never identified the client,
    so every login is Postgres's own password check on a backend of its own."""
    d = L5pgd(workdir / "l5pgd-passthrough-pool", peer_cluster, user="postgres",
              auth_overrides=["auth.tcp=passthrough", "auth.upstream_authenticates=true"],
              extra_overrides=["upstream.host=127.0.0.1", "pool.mode=session"])
    with d:
        env = dict(PGHOST=d.host, PGPORT=str(d.port), PGPASSWORD=ALICE_PASSWORD)
        pids = set()
        for _ in range(2):
            r = psql_as(ALICE, env, ALICE, "select pg_backend_pid()")
            assert r.returncode == 0, r.stderr
            pids.add(r.stdout.strip())
            time.sleep(0.3)  # the session ends and would be returned to the pool
        assert len(pids) == 2, pids
        assert d.metric("l5pg_pool_returned_total") == 0
        r = psql_as(ALICE, dict(env, PGPASSWORD="wrong"), ALICE)  # still asked every time
        assert r.returncode != 0 and "password authentication failed" in r.stderr, r.stderr


def test_passthrough_refuses_a_login_postgres_did_not_authenticate(workdir, peer_cluster, alice):
    """The operator's word is wrong: upstream over the Unix socket, where pg_hba.conf's peer
    rule (with its map) lets l5pgd's OS user open any role without a password. Postgres says
    AuthenticationOk unasked; l5pgd refuses the session before the client sees it."""
    d = L5pgd(workdir / "l5pgd-passthrough-unasked", peer_cluster, user="postgres",
              auth_overrides=["auth.tcp=passthrough", "auth.upstream_authenticates=true"])
    with d:
        env = dict(PGHOST=d.host, PGPORT=str(d.port))
        for role in ("postgres", ALICE):
            r = psql_as(ALICE, env, role)
            assert r.returncode != 0, r.stdout
            assert "PostgreSQL accepted the login without authenticating the client" in r.stderr, \
                r.stderr
        assert d.metric("l5pg_auth_failures_total", transport="tcp",
                        reason="upstream_did_not_authenticate") == 2
        assert "Postgres accepted the login without asking for a password" in d.log_text()
        # A query pipelined behind the StartupMessage must not run before Postgres asked for
        # a password (here it never does): held, then dropped with the session.
        table = f"l5pg_pipelined_{os.getpid()}"
        with pgwire.connect(d.host, d.port) as s:
            sql = f"create table {table} (i int)".encode() + b"\0"
            s.sendall(pgwire.startup_packet(user="postgres") +
                      b"Q" + struct.pack("!I", 4 + len(sql)) + sql)
            types = []
            while not types or types[-1] != "E":
                types.append(pgwire.read_message(s)[0])
            assert types == ["E"], types  # nothing of the login reached the client
        time.sleep(0.5)  # had it been forwarded, Postgres would have run it by now
        assert sql_as_postgres(peer_cluster, f"select to_regclass('{table}') is null") == "t"


@pytest.mark.timeout(60)
def test_passthrough_client_leaving_before_the_password_ask_ends_at_once(workdir, peer_cluster):
    """An SHM client under passthrough sends its StartupMessage and a query and leaves before
    Postgres asks for its password: the query waits for the ask, which l5pgd now sees while
    it discards Postgres's output for the departed client. The session ends when Postgres
    has its bytes (it refuses them: they are no password), not at the drain timeout, and is
    no error of l5pgd's. (It waited limits.drain_timeout_ms and closed as an error.)"""
    d = L5pgd(workdir / "l5pgd-passthrough-leaving", peer_cluster, user="postgres",
              auth_overrides=["auth.local=passthrough", "auth.tcp=reject",
                              "auth.upstream_authenticates=true"],
              extra_overrides=["upstream.host=127.0.0.1", "limits.drain_timeout_ms=60000"])
    with d:
        errors = d.metric("l5pg_session_errors_total", transport="shm")
        # The postmaster stopped: the connection waits in its accept queue, and Postgres asks
        # for the password only after the client has left.
        postmaster = int((peer_cluster.data_dir / "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGSTOP)
        try:
            c = l5wire.ShmClient(d.socket_path)
            assert c.upgrade() == b"L"
            sql = b"select 1\0"
            c.write_bytes(pgwire.startup_packet(user=ALICE, database=ALICE) +
                          b"Q" + struct.pack("!I", 4 + len(sql)) + sql)
            deadline = time.monotonic() + 10
            while "login: role" not in d.log_text():
                assert time.monotonic() < deadline, d.log_tail()
                time.sleep(0.02)
            c.close(clean=True)
            deadline = time.monotonic() + 10
            while "client closed the connection" not in d.log_text():
                assert time.monotonic() < deadline, d.log_tail()
                time.sleep(0.02)
        finally:
            os.kill(postmaster, signal.SIGCONT)
        deadline = time.monotonic() + 30
        while d.metric("l5pg_sessions_active", transport="shm") != 0:
            assert time.monotonic() < deadline, d.log_tail()
            time.sleep(0.05)
        assert d.metric("l5pg_session_errors_total", transport="shm") == errors, d.log_tail()
        assert "drain timeout" not in d.log_text()


def test_passthrough_needs_the_operators_word(l5pgd_binary):
    r = subprocess.run([str(l5pgd_binary), "--check", "-o", "auth.local=passthrough"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "auth.local: passthrough" in r.stderr and "auth.upstream_authenticates" in r.stderr


# Opens many Unix connections as alice that never send a byte, holds them until stdin closes.
FLOOD = r"""
import resource, socket, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
socks = []
for _ in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    try:
        s.connect(sys.argv[1])
        socks.append(s)
    except OSError:
        s.close()
print(len(socks), flush=True)
sys.stdin.read()
"""


@pytest.mark.timeout(120)
@pytest.mark.serial  # a login within 1 s during a flood: another test's load would take longer
def test_idle_connection_flood_does_not_keep_others_out(guarded):
    refused = guarded.metric("l5pg_connections_refused_total", reason="max_startup_per_peer")
    flood = subprocess.Popen([sys.executable, "-c", FLOOD, str(guarded.socket_path), "1200"],
                             user=ALICE, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             cwd="/")
    try:
        assert flood.stdout.readline().strip().isdigit()
        started = time.monotonic()
        r = psql_as("root", dict(PGHOST=str(guarded.socket_dir), PGPORT=str(guarded.port)),
                    "postgres", "select 42", timeout=10)
        elapsed = time.monotonic() - started
        assert r.returncode == 0 and r.stdout.strip() == "42", r.stderr
        assert elapsed < 1.0, f"a normal client took {elapsed:.2f}s during the flood"
        assert guarded.metric("l5pg_connections_refused_total",
                              reason="max_startup_per_peer") > refused
    finally:
        flood.stdin.close()
        flood.wait(timeout=30)
    assert guarded.alive()
