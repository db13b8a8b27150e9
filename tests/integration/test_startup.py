"""l5pgd's handling of invalid startup traffic, unreachable upstream, and bad configuration."""
import os
import socket
import stat
import struct
import subprocess
import time
from pathlib import Path

import pytest

from tests.harness import l5wire, paths, pgwire
from tests.harness.client import make_target, psql, psql_cmd, run
from tests.harness.l5pgd import L5pgd
from tests.harness.ports import free_port
from tests.harness.waiting import wait_for


def expect_fatal(s, sqlstate=None):
    typ, body = pgwire.read_message(s)
    assert typ == "E", f"expected ErrorResponse, got {typ!r} {body[:200]!r}"
    f = pgwire.parse_fields(body)
    assert f.get("V", f.get("S")) in ("FATAL", "ERROR"), f
    if sqlstate:
        assert f.get("C") == sqlstate, f
    assert f.get("M"), f
    assert pgwire.at_eof(s), "connection not closed after ErrorResponse"
    return f


def raw_connection(server, l5pgd, cluster):
    """l5pgd over TCP, or Postgres itself (the yardstick) over its Unix socket, where a
    Postgres built with GSSAPI does not offer GSS encryption."""
    if server == "l5pgd":
        return pgwire.connect(l5pgd.host, l5pgd.port)
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect(str(cluster.socket_dir / f".s.PGSQL.{cluster.port}"))
    return s


def test_marker_file_is_never_written_through_a_link(workdir, cluster):
    """l5pgd writes the marker beside its socket through a temporary file. In a socket
    directory others may write to, a symbolic link planted at its name (then a fixed one, now
    random) had l5pgd truncate and chmod 0644 whatever it pointed at."""
    d = L5pgd(workdir / "l5pgd-marker-link", cluster)
    d.socket_dir.mkdir(parents=True, exist_ok=True)
    victim = workdir / "marker-victim"
    victim.write_text("keep me\n")
    os.chmod(victim, 0o600)
    Path(f"{d.socket_path}.l5pg.tmp").symlink_to(victim)
    with d:
        assert Path(f"{d.socket_path}.l5pg").read_text().startswith("l5pgd 1 ")
        names = sorted(p.name for p in d.socket_dir.iterdir())
        marker = Path(f"{d.socket_path}.l5pg").name
        assert names == sorted([d.socket_path.name, marker, f"{marker}.tmp"]), names
    assert victim.read_text() == "keep me\n"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600


def tcp_timer(local_port, remote_port):
    """The timer /proc/net/tcp shows for the IPv4 socket between these ports (its `tr`: 0
    none, 1 retransmit, 2 keepalive, ...), or None when there is no such socket."""
    with open("/proc/net/tcp") as f:
        for line in list(f)[1:]:
            fields = line.split()
            local, remote = (int(a.split(":")[1], 16) for a in fields[1:3])
            if (local, remote) == (local_port, remote_port):
                return int(fields[5].split(":")[0], 16)
    return None


@pytest.mark.timeout(30)
def test_tcp_client_connections_have_keepalive(l5pgd):
    """A TCP client whose host went away while its session idled held that session, its
    backend and whatever locks it had for ever: l5pgd's end of a TCP client's connection
    has the kernel's keepalive on, as Postgres's own has by default."""
    with pgwire.connect(l5pgd.host, l5pgd.port) as s:
        s.sendall(pgwire.startup_packet(application_name="keepalive"))
        pgwire.read_until_ready(s)
        ours = s.getsockname()[1]
        wait_for(lambda: tcp_timer(l5pgd.port, ours) == 2, 5,
                 "l5pgd's end to have a keepalive timer")


@pytest.mark.timeout(30)
def test_garbage_http(l5pgd):
    before = l5pgd.metric("l5pg_startup_rejected_total")
    with pgwire.connect(l5pgd.host, l5pgd.port) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        expect_fatal(s, "08P01")
    assert l5pgd.metric("l5pg_startup_rejected_total") > before


@pytest.mark.timeout(30)
@pytest.mark.parametrize("server", ["l5pgd", "postgres"])
def test_garbage_protocol_code(l5pgd, cluster, server):
    """An unknown protocol version or request code: FATAL 0A000 from both, same words."""
    for code, version in ((0x12345678, "4660.22136"), ((1234 << 16) | 5681, "1234.5681")):
        with raw_connection(server, l5pgd, cluster) as s:
            s.sendall(struct.pack("!II", 16, code) + b"\xde\xad\xbe\xef\x00\x01\x02\x03")
            f = expect_fatal(s, "0A000")
            assert f["M"] == f"unsupported frontend protocol {version}: server supports 3.0 to 3.0" \
                or (server == "postgres" and f["M"].startswith(
                    f"unsupported frontend protocol {version}: server supports ")), f


@pytest.mark.timeout(30)
def test_oversized_startup(l5pgd):
    with pgwire.connect(l5pgd.host, l5pgd.port) as s:
        s.sendall(struct.pack("!II", 20000, pgwire.PROTO_3_0) + b"user\0postgres\0")
        f = expect_fatal(s)
        assert f.get("C") == "08P01", f


@pytest.mark.timeout(30)
@pytest.mark.parametrize("code", [pgwire.SSL_REQUEST, pgwire.GSSENC_REQUEST], ids=["ssl", "gssenc"])
def test_encryption_request_declined_then_plain_session(l5pgd, code):
    with pgwire.connect(l5pgd.host, l5pgd.port) as s:
        s.sendall(pgwire.request_packet(code))
        assert pgwire.recv_exact(s, 1) == b"N"
        s.sendall(pgwire.startup_packet(application_name="l5pg-raw"))
        msgs = pgwire.read_until_ready(s)
        types = [t for t, _ in msgs]
        assert types[0] == "R" and struct.unpack("!I", msgs[0][1][:4])[0] == 0, msgs[:3]  # AuthOk
        assert "K" in types and types[-1] == "Z", types
        msgs = pgwire.query(s, "select 40+2")
        data = [b for t, b in msgs if t == "D"]
        assert len(data) == 1 and data[0].endswith(b"42"), msgs
        pgwire.terminate(s)


def unsupported(code):
    return f"unsupported frontend protocol {code >> 16}.{code & 0xffff}: server supports 3.0 to 3.0"


SSL, GSS = pgwire.SSL_REQUEST, pgwire.GSSENC_REQUEST


@pytest.mark.timeout(30)
@pytest.mark.parametrize("server", ["l5pgd", "postgres"])
def test_repeated_encryption_request_is_refused(l5pgd, cluster, server):
    """Postgres answers one GSSENCRequest per connection and refuses a repeat with FATAL
    0A000; so does l5pgd."""
    with raw_connection(server, l5pgd, cluster) as s:
        s.sendall(pgwire.request_packet(GSS))
        assert pgwire.recv_exact(s, 1) == b"N"
        s.sendall(pgwire.request_packet(GSS))
        f = expect_fatal(s, "0A000")
        assert f["M"] == unsupported(GSS) or (
            server == "postgres" and f["M"].startswith(unsupported(GSS)[:-6])), f


@pytest.mark.timeout(30)
@pytest.mark.parametrize("requests", [[SSL, SSL, SSL], [SSL, GSS, SSL, GSS]],
                         ids=["ssl_thrice", "ssl_gssenc_twice"])
def test_encryption_requests_are_bounded(l5pgd, requests):
    """Two SSLRequests (the shim's own before its upgrade request, then the program's) and one
    GSSENCRequest per connection, then FATAL 0A000 as from Postgres. (l5pgd answered 'N' for
    ever: a client sending nothing but requests kept a worker in its startup loop, every other
    session of that worker waiting, and the answers of a client that never read them piled up
    in l5pgd's memory.)"""
    with pgwire.connect(l5pgd.host, l5pgd.port) as s:
        for code in requests[:-1]:
            s.sendall(pgwire.request_packet(code))
            assert pgwire.recv_exact(s, 1) == b"N"
        s.sendall(pgwire.request_packet(requests[-1]))
        assert expect_fatal(s, "0A000")["M"] == unsupported(requests[-1])


@pytest.mark.timeout(30)
@pytest.mark.parametrize("server", ["l5pgd", "postgres"])
@pytest.mark.parametrize("requests", [[SSL, GSS], [GSS, SSL]], ids=["ssl_gssenc", "gssenc_ssl"])
def test_both_encryption_requests_then_plain_session(l5pgd, cluster, server, requests):
    with raw_connection(server, l5pgd, cluster) as s:
        for code in requests:
            s.sendall(pgwire.request_packet(code))
            assert pgwire.recv_exact(s, 1) == b"N"
        s.sendall(pgwire.startup_packet(application_name="l5pg-raw"))
        assert [t for t, _ in pgwire.read_until_ready(s)][-1] == "Z"
        pgwire.terminate(s)


@pytest.mark.timeout(30)
def test_second_upgrade_request_is_refused(l5pgd):
    """One L5 upgrade request per connection (accepted or declined): a second is refused as
    Postgres refuses a request code it does not take, where it was declined again and again.
    Around it the shim's SSLRequest and the program's own are both answered."""
    with pgwire.connect(l5pgd.host, l5pgd.port) as s:
        s.sendall(pgwire.request_packet(SSL))
        assert pgwire.recv_exact(s, 1) == b"N"
        assert l5wire.send_upgrade(s, 64 * 1024, 64 * 1024) == b"N"  # no SHM over TCP
        for code in (SSL, GSS):
            s.sendall(pgwire.request_packet(code))
            assert pgwire.recv_exact(s, 1) == b"N"
        s.sendall(l5wire.upgrade_packet(64 * 1024, 64 * 1024))
        f = expect_fatal(s, "0A000")
        assert f["M"] == unsupported(l5wire.L5_UPGRADE_CODE), f


@pytest.mark.timeout(30)
def test_sslmode_prefer_falls_back(target):
    out = psql(target, "select 'nossl'", env={"PGSSLMODE": "prefer"})
    assert out == "nossl"


@pytest.fixture(scope="module")
def l5pgd_no_upstream(workdir, cluster, l5pgd_binary):
    d = L5pgd(workdir / "l5pgd-noup", cluster, workers=1, upstream_port=free_port())
    d.start()
    yield d
    d.stop()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_upstream_down(request, l5pgd_no_upstream, transport):
    if transport == "shm":
        request.getfixturevalue("shim")
    d = l5pgd_no_upstream
    before = d.metric("l5pg_upstream_connect_failures_total")
    t0 = time.monotonic()
    r = run(psql_cmd("-c", "select 1"), make_target(transport, d), check=False, timeout=20)
    elapsed = time.monotonic() - t0
    assert r.returncode != 0
    assert "could not connect to the PostgreSQL server" in r.stderr, r.stderr
    assert elapsed < 5, f"took {elapsed:.1f}s"
    assert d.metric("l5pg_upstream_connect_failures_total") > before
    assert d.alive()


@pytest.mark.timeout(30)
def test_wrong_database(l5pgd, target):
    r = psql(target, "select 1", dbname="no_such_db_l5pg", check=False)
    assert r.returncode != 0
    assert 'database "no_such_db_l5pg" does not exist' in r.stderr, r.stderr
    assert "FATAL" in r.stderr
    # l5pgd is unaffected
    assert psql(target, "select 3") == "3"


def run_l5pgd(*overrides, timeout=10):
    cmd = [str(paths.L5PGD)]
    for o in overrides:
        cmd += ["-o", o]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"l5pgd {' '.join(overrides)} did not exit within {timeout}s (it should refuse)")


@pytest.mark.timeout(30)
def test_check_warns_of_settings_without_effect(l5pgd_binary, tmp_path):
    """Valid, but without effect as the rest is set: --check (systemctl reload's first step)
    says so and passes; l5pgd says it at start and at each reload too. (An ident file that
    cannot be read is an error all the same, with the reason.)"""
    r = subprocess.run([str(paths.L5PGD), "--check", "-o", f"auth.ident_file={tmp_path}/none"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "No such file or directory" in r.stderr, r.stderr
    (tmp_path / "ident").write_text("root postgres\n")
    r = subprocess.run([str(paths.L5PGD), "--check", "-o", f"listen.unix_socket_dir={tmp_path}",
                        "-o", "auth.local=trust", "-o", f"auth.ident_file={tmp_path}/ident"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    assert "l5pgd: warning: auth.ident_file: no effect, auth.local is not peer" in r.stderr, \
        r.stderr


@pytest.mark.timeout(30)
@pytest.mark.parametrize("override,key", [
    ("listen.port=abc", "listen.port"),
    ("listen.port=70000", "listen.port"),
    ("listen.no_such_key=1", "listen.no_such_key"),
    ("workers.count=-3", "workers.count"),
])
def test_config_errors(l5pgd_binary, tmp_path, override, key):
    r = run_l5pgd(f"listen.unix_socket_dir={tmp_path}", f"metrics.listen=127.0.0.1:{free_port()}",
                  override)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert key in r.stderr, r.stderr


@pytest.mark.timeout(30)
@pytest.mark.parametrize("options", [[], [("_pq_.l5pg_test", "1")]], ids=["3.2", "3.2-option"])
@pytest.mark.parametrize("kind", ["tcp", "shm"])
def test_newer_protocol_negotiated_down_as_postgres_does(l5pgd, cluster, kind, options):
    packet = pgwire.startup_packet_of([("user", "postgres"), ("database", "postgres"), *options],
                                      version=pgwire.PROTO_3_2)
    with socket.socket(socket.AF_UNIX) as direct:
        direct.settimeout(10)
        direct.connect(str(cluster.socket_dir / f".s.PGSQL.{cluster.port}"))
        direct.sendall(packet)
        from_postgres = pgwire.read_until_ready(direct)
        pgwire.terminate(direct)
    assert from_postgres[0][0] == "v", from_postgres[:2]
    if kind == "shm":
        client = l5wire.ShmClient(l5pgd.socket_path)
        assert client.upgrade() == b"L"
        client.write_bytes(packet)
        msgs, run = client.read_until_ready(), client.query
    else:
        s = pgwire.connect(l5pgd.host, l5pgd.port)
        s.sendall(packet)
        msgs, run = pgwire.read_until_ready(s), lambda sql: pgwire.query(s, sql)
    types = [t for t, _ in msgs]
    # l5pgd answers what Postgres answers, first; and only once: Postgres behind it got 3.0
    # without options, or it would have sent a NegotiateProtocolVersion of its own.
    assert msgs[0] == from_postgres[0], (msgs[0], from_postgres[0])
    assert types.count("v") == 1 and types[-1] == "Z", types
    # Protocol 3.0's cancel key: a pid and a 4-byte secret.
    assert [len(body) for t, body in msgs if t == "K"] == [8], types
    assert [body for t, body in run("select 41 + 1") if t == "D"][0].endswith(b"42")
    if kind == "shm":
        client.close()
    else:
        pgwire.terminate(s)
        s.close()


@pytest.mark.timeout(30)
def test_newer_protocol_negotiated_down_before_a_refusal(workdir, cluster, l5pgd_binary):
    """Postgres sends its NegotiateProtocolVersion before it refuses a login it cannot take
    (too many clients, shutting down); l5pgd over limits.max_sessions did it after."""
    d = L5pgd(workdir / "l5pgd-v-full", cluster, workers=1,
              extra_overrides=["limits.max_sessions=1"])
    with d:
        holder = pgwire.connect(d.host, d.port)
        holder.sendall(pgwire.startup_packet())
        assert pgwire.read_until_ready(holder)[-1][0] == "Z"
        with pgwire.connect(d.host, d.port) as s:
            s.sendall(pgwire.startup_packet_of([("user", "postgres")], version=pgwire.PROTO_3_2))
            assert pgwire.read_message(s)[0] == "v"
            assert expect_fatal(s, "53300")
        pgwire.terminate(holder)
        holder.close()

