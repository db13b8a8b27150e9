"""TLS on l5pgd's TCP listener (tls.*), with a CA, server and client certificates made here
by the openssl command line tool, and real psql clients in every sslmode that matters."""
import os
import pty
import select
import signal
import ssl
import subprocess
import time

import pytest

from tests.harness import pgwire
from tests.harness.cancel import stop_process
from tests.harness.client import Target, popen, psql_cmd, run, shim_debug_lines
from tests.harness.l5pgd import L5pgd
from tests.harness.openssl_client import TlsClient
from tests.harness.procstat import cpu_seconds, in_kernel_between
from tests.harness.rdma import rdma_overrides, rdma_target, upgraded_rdma
from tests.harness.waiting import wait_for


def openssl(*args, cwd):
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def pki(workdir):
    """ca.crt; server.crt for localhost and 127.0.0.1; client.crt for CN=postgres."""
    d = workdir / "pki"
    d.mkdir(exist_ok=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=l5pg test CA",
            "-keyout", "ca.key", "-out", "ca.crt", cwd=d)
    (d / "server.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name, subject, ext in (("server", "/CN=localhost", ["-extfile", "server.ext"]),
                               ("client", "/CN=postgres", [])):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", f"{name}.key",
                "-out", f"{name}.csr", cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-out", f"{name}.crt", *ext, cwd=d)
        (d / f"{name}.key").chmod(0o600)
    return d


def tls_l5pgd(workdir, cluster, pki, name, mode, ca=False, rdma=False, extra=()):
    overrides = [f"tls.mode={mode}", f"tls.cert_file={pki / 'server.crt'}",
                 f"tls.key_file={pki / 'server.key'}"] + (rdma_overrides("soft") if rdma else [])
    overrides += list(extra)
    if ca:
        overrides.append(f"tls.ca_file={pki / 'ca.crt'}")
    return L5pgd(workdir / name, cluster, extra_overrides=overrides)


def conninfo(d, host="127.0.0.1", **env):
    target = Target("tcp", host, d.port, extra={k: str(v) for k, v in env.items()})
    return run(psql_cmd("-c", r"\conninfo", "-c", "select 42"), target, check=False, timeout=60)


@pytest.fixture(scope="module")
def required(workdir, cluster, pki):
    d = tls_l5pgd(workdir, cluster, pki, "l5pgd-tls-require", "require")
    d.start()
    yield d
    d.stop()


def test_sslmode_require(required):
    r = conninfo(required, PGSSLMODE="require")
    assert r.returncode == 0, r.stderr
    assert "SSL connection (protocol: TLSv1.3" in r.stdout and "42" in r.stdout


def test_sslmode_verify_full(required, pki):
    r = conninfo(required, host="localhost", PGSSLMODE="verify-full", PGSSLROOTCERT=pki / "ca.crt")
    assert r.returncode == 0, r.stderr
    assert "SSL connection" in r.stdout


def test_verify_full_rejects_a_server_it_cannot_verify(required, pki):
    """The client's side of the trust: a CA that did not sign l5pgd's certificate."""
    r = conninfo(required, host="localhost", PGSSLMODE="verify-full", PGSSLROOTCERT=pki / "client.crt")
    assert r.returncode != 0
    assert "certificate verify failed" in r.stderr


def test_plaintext_client_refused_under_require(required):
    failures = required.metric("l5pg_auth_failures_total", transport="tcp", reason="tls_required")
    r = conninfo(required, PGSSLMODE="disable")
    assert r.returncode != 0
    assert "SSL required" in r.stderr and "tls.mode=require" in r.stderr, r.stderr
    assert required.metric("l5pg_auth_failures_total", transport="tcp",
                           reason="tls_required") == failures + 1


def test_allow_serves_both(workdir, cluster, pki):
    with tls_l5pgd(workdir, cluster, pki, "l5pgd-tls-allow", "allow") as d:
        r = conninfo(d, PGSSLMODE="disable")
        assert r.returncode == 0 and "SSL connection" not in r.stdout, r.stderr
        r = conninfo(d, PGSSLMODE="require")
        assert r.returncode == 0 and "SSL connection" in r.stdout, r.stderr


def test_a_client_over_max_sessions_reads_the_refusal_through_tls(workdir, cluster, pki):
    """Over limits.max_sessions the FATAL 53300 comes after the TLS handshake, inside TLS, as
    Postgres sends its "too many clients": libpq shows it. (An error before the handshake
    libpq 17.1, 16.5, 15.9, 14.14 and later would not show; an older one would, so there this
    test cannot tell the two apart.)"""
    with tls_l5pgd(workdir, cluster, pki, "l5pgd-tls-full", "require",
                   extra=["limits.max_sessions=1"]) as d:
        target = Target("tcp", "127.0.0.1", d.port, extra={"PGSSLMODE": "require"})
        holder = popen(psql_cmd("-c", "select pg_sleep(60)"), target, text=True)
        try:
            wait_for(lambda: d.metric("l5pg_sessions_active", transport="tcp") >= 1, 15,
                     "the first session")
            r = run(psql_cmd("-c", "select 1"), target, check=False, timeout=60)
            assert r.returncode != 0, r.stdout
            assert "FATAL:  l5pgd: too many connections (limits.max_sessions reached)" in \
                r.stderr, r.stderr
        finally:
            stop_process(holder)

def test_shm_upgrade_request_inside_tls_is_declined_inside_tls(required, pki):
    """Shared memory needs the Unix socket: a TLS client asking for it over TCP reads the
    decline inside TLS and goes on in it (the 'N' went out in clear, into the TLS stream,
    which the client then saw as a broken record)."""
    import socket
    import ssl

    from tests.harness import l5wire, pgwire

    raw = socket.create_connection(("127.0.0.1", required.port), timeout=10)
    raw.sendall(pgwire.request_packet(pgwire.SSL_REQUEST))
    assert pgwire.recv_exact(raw, 1) == b"S"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    with ctx.wrap_socket(raw, server_hostname="localhost") as s:
        assert l5wire.send_upgrade(s, 64 * 1024, 64 * 1024) == b"N"
        s.sendall(pgwire.startup_packet(application_name="l5pg-tls-shm"))
        assert pgwire.read_until_ready(s)[-1][0] == "Z"
        pgwire.terminate(s)
    assert "upgrade declined: shared memory needs the Unix socket listener" in \
        required.log_text()


def test_bulk_result_through_tls(required):
    """Many TLS records each way: a large COPY out and a large statement in."""
    big = "x" * 100_000
    target = Target("tcp", "127.0.0.1", required.port, extra={"PGSSLMODE": "require"})
    r = run(psql_cmd("-c", "select count(*), sum(length(repeat('y', g))) from "
                     "generate_series(1, 3000) g", "-c", f"select length('{big}')"),
            target, check=False, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["3000|4501500", "100000"]


def test_key_update_while_l5pgd_cannot_send(required):
    """A client asks for a TLS 1.3 KeyUpdate (its peer to update its keys too) while it does
    not read a large result, so l5pgd cannot send its own KeyUpdate: l5pgd takes the request
    and the message behind it without spinning on the socket, answers once the client reads
    again, and nothing is lost either way. (OpenSSL 3 sends the answering KeyUpdate with the
    next write, so the read itself never waits for writability.)"""
    c = TlsClient.connect("127.0.0.1", required.port)
    try:
        assert c.tls13()
        c.sendall(pgwire.startup_packet())
        assert [t for t, _ in pgwire.read_until_ready(c)][-1] == "Z"
        rows = 40_000  # 40 MB: more than every buffer between Postgres and this client
        body = f"select repeat('x', 1000) from generate_series(1, {rows})".encode() + b"\0"
        c.sendall(b"Q" + (len(body) + 4).to_bytes(4, "big") + body)
        time.sleep(1)  # the buffers fill; l5pgd stops sending
        held = in_kernel_between(required.port, c.sock.getsockname()[1])
        assert held < rows * 1000, f"the kernel holds all of the result ({held} bytes)"
        c.request_key_update()
        sync = b"S" + (4).to_bytes(4, "big")  # sent with the KeyUpdate; answered after the rows
        c.sendall(sync)
        time.sleep(0.5)
        before = cpu_seconds(required.pid())
        time.sleep(2)
        spent = cpu_seconds(required.pid()) - before
        assert spent < 0.5, f"l5pgd used {spent:.2f} s of CPU in 2 s while the client did not read"
        # Nothing was lost: every row, then the query's and the Sync's ReadyForQuery.
        msgs = pgwire.read_until_ready(c)
        assert [t for t, _ in msgs].count("D") == rows
        assert msgs[-1][0] == "Z"
        assert pgwire.read_message(c)[0] == "Z"
        assert pgwire.query(c, "select 42")[1][0] == "D"
        pgwire.terminate(c)
    finally:
        c.close()


def test_handshake_blocked_on_a_client_that_does_not_read_does_not_spin(workdir, cluster, pki):
    """l5pgd's handshake flight (here a certificate chain of some MB) waits for a client that
    does not read; bytes the client sends meanwhile must not make l5pgd retry the handshake on
    every loop round (the read event stayed on while OpenSSL waited to write)."""
    chain = workdir / "pki" / "long-chain.crt"
    ca = (pki / "ca.crt").read_text()
    chain.write_text((pki / "server.crt").read_text() + ca * 10000)
    overrides = ["tls.mode=require", f"tls.cert_file={chain}",
                 f"tls.key_file={pki / 'server.key'}", "limits.startup_timeout_ms=20000"]
    # Loading 10,000 certificates takes l5pgd seconds; under TSan on a slow host, more than 15.
    with L5pgd(workdir / "l5pgd-tls-long-chain", cluster, extra_overrides=overrides,
               start_timeout=90) as d:
        s = pgwire.connect("127.0.0.1", d.port, timeout=30)
        try:
            s.sendall(pgwire.request_packet(pgwire.SSL_REQUEST))
            assert pgwire.recv_exact(s, 1) == b"S"
            # The ClientHello, made by Python's ssl in memory; the answer is never read.
            incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            hello = ctx.wrap_bio(incoming, outgoing)
            with pytest.raises(ssl.SSLWantReadError):
                hello.do_handshake()
            s.sendall(outgoing.read())
            time.sleep(1)  # l5pgd writes its flight until the socket is full
            # OpenSSL still holds part of it (the test proves nothing otherwise).
            certificates = 10000 * len(ssl.PEM_cert_to_DER_cert(ca))
            held = in_kernel_between(d.port, s.getsockname()[1])
            assert held < certificates, f"the kernel took the whole flight ({held} bytes)"
            s.sendall(b"\x16")  # one more byte: OpenSSL cannot take it while it writes
            time.sleep(0.5)
            before = cpu_seconds(d.pid())
            time.sleep(2)
            spent = cpu_seconds(d.pid()) - before
            assert spent < 0.5, f"l5pgd used {spent:.2f} s of CPU in 2 s on one stalled handshake"
        finally:
            s.close()


def test_client_certificates_when_a_ca_is_configured(workdir, cluster, pki):
    with tls_l5pgd(workdir, cluster, pki, "l5pgd-tls-ca", "require", ca=True) as d:
        r = conninfo(d, PGSSLMODE="require")
        assert r.returncode != 0, r.stdout
        r = conninfo(d, PGSSLMODE="require", PGSSLCERT=pki / "client.crt", PGSSLKEY=pki / "client.key")
        assert r.returncode == 0 and "SSL connection" in r.stdout, r.stderr
        # The CertificateRequest names the CA (clients that choose a certificate by its
        # issuer, as Java's key managers do, sent none when it named nothing).
        r = subprocess.run(["openssl", "s_client", "-starttls", "postgres",
                            "-connect", f"127.0.0.1:{d.port}"],
                           input="", capture_output=True, text=True, timeout=30)
        assert "No client certificate CA names sent" not in r.stdout, r.stdout
        names = r.stdout.split("Acceptable client certificate CA names")[1].splitlines()[1]
        assert "CN = l5pg test CA" in names, r.stdout


def tls_login(d, ctx, session=None):
    """A raw TLS session through Python's ssl (SSLRequest first), logged in."""
    s = pgwire.connect("127.0.0.1", d.port, timeout=30)
    s.sendall(pgwire.request_packet(pgwire.SSL_REQUEST))
    assert pgwire.recv_exact(s, 1) == b"S"
    s = ctx.wrap_socket(s, session=session)
    s.sendall(pgwire.startup_packet())
    assert pgwire.read_until_ready(s)[-1][0] == "Z"
    return s


def unverified_context(pki, max_version=None):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if max_version:
        ctx.maximum_version = max_version
    ctx.load_cert_chain(pki / "client.crt", pki / "client.key")
    return ctx


def test_tls_1_2_gets_no_session_ticket(workdir, cluster, pki):
    """No resumption, TLS 1.2 included: a TLS 1.2 client got a session ticket, and with
    tls.ca_file set its next connection, resuming from it, failed its handshake."""
    with tls_l5pgd(workdir, cluster, pki, "l5pgd-tls-tickets", "require", ca=True) as d:
        ctx = unverified_context(pki, ssl.TLSVersion.TLSv1_2)
        first = tls_login(d, ctx)
        assert first.version() == "TLSv1.2"
        session = first.session
        pgwire.terminate(first)
        first.close()
        assert not session.has_ticket
        second = tls_login(d, ctx, session=session)
        assert not second.session_reused
        assert pgwire.query(second, "select 42")[1][0] == "D"
        pgwire.terminate(second)
        second.close()


def test_tls_client_leaving_without_close_notify_is_no_error(required, pki):
    """A TLS client that vanishes (killed: no close_notify) has left, as over a plain socket;
    OpenSSL 3's "unexpected eof" was logged as a read error and counted in
    l5pg_session_errors_total."""
    errors = required.metric("l5pg_session_errors_total", transport="tcp")
    sessions = required.metric("l5pg_sessions_active", transport="tcp")
    s = tls_login(required, unverified_context(pki))
    s.close()  # Python's ssl sends no close_notify on close() (only unwrap() does)
    wait_for(lambda: required.metric("l5pg_sessions_active", transport="tcp") == sessions, 10,
             "the session to end")
    assert required.metric("l5pg_session_errors_total", transport="tcp") == errors
    assert "unexpected eof" not in required.log_text()


def test_encrypted_key_is_refused_without_a_prompt(l5pgd_binary, pki, tmp_path):
    """A key encrypted with a passphrase: l5pgd says so and exits, also on a terminal, where
    OpenSSL's own callback prompted for the passphrase (l5pgd --check, or a reload in the
    foreground, stopped at a hidden prompt)."""
    key = tmp_path / "encrypted.key"
    openssl("pkey", "-in", str(pki / "server.key"), "-aes256", "-passout", "pass:secret",
            "-out", str(key), cwd=tmp_path)
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session of its own, with the pty as its terminal
        try:
            os.execv(str(l5pgd_binary), [str(l5pgd_binary), "--check", "-o", "tls.mode=require",
                                         "-o", f"tls.cert_file={pki / 'server.crt'}",
                                         "-o", f"tls.key_file={key}"])
        finally:
            os._exit(127)  # never back into pytest
    out = b""
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
    finally:
        done, status = os.waitpid(pid, os.WNOHANG)
        while not done and time.monotonic() < deadline + 5:  # the terminal closes first
            time.sleep(0.05)
            done, status = os.waitpid(pid, os.WNOHANG)
        if not done:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    text = out.decode(errors="replace")
    assert done, f"l5pgd --check still running after 20 s: {text!r}"
    assert os.waitstatus_to_exitcode(status) == 2, text
    assert "encrypted with a passphrase" in text and "pass phrase" not in text.lower(), text


def test_unreadable_certificate_stops_l5pgd_at_start(l5pgd_binary, pki):
    r = subprocess.run([str(l5pgd_binary), "--check", "-o", "tls.mode=require",
                        "-o", f"tls.cert_file={pki / 'missing.crt'}",
                        "-o", f"tls.key_file={pki / 'server.key'}"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "tls.cert_file" in r.stderr and "missing.crt" in r.stderr


# ---- RDMA (soft device) negotiated inside TLS: the shim's L5PG_SSLMODE

@pytest.fixture(scope="module")
def required_rdma(workdir, cluster, pki):
    d = tls_l5pgd(workdir, cluster, pki, "l5pgd-tls-rdma", "require", rdma=True)
    d.start()
    yield d
    d.stop()


def rdma_conninfo(d, **env):
    target = rdma_target(d, device="soft", L5PG_DEBUG=1, **env)
    return run(psql_cmd("-c", r"\conninfo", "-c", "select 42"), target, check=False, timeout=60)


def assert_fresh_tls_connection(r, why):
    """No upgrade, for `why`; libpq's own TLS connection on the fresh socket answered."""
    assert r.returncode == 0, r.stderr
    assert "SSL connection" in r.stdout and "42" in r.stdout
    lines = "\n".join(shim_debug_lines(r.stderr))
    assert why in lines and "a fresh connection" in lines, lines
    assert not upgraded_rdma(r.stderr)


def test_rdma_session_negotiated_inside_tls(required_rdma, pki):
    """tls.mode=require: the upgrade's offer, token and Hellos go inside TLS, verified
    against the test's CA and the server's IP address; the session then runs over RDMA."""
    sessions = required_rdma.metric("l5pg_sessions_total", transport="rdma")
    r = rdma_conninfo(required_rdma, L5PG_SSLMODE="verify-full", L5PG_SSLROOTCERT=pki / "ca.crt")
    assert r.returncode == 0, r.stderr
    assert "42" in r.stdout
    assert upgraded_rdma(r.stderr), r.stderr
    assert any("handshake inside TLS" in ln for ln in shim_debug_lines(r.stderr)), r.stderr
    assert required_rdma.metric("l5pg_sessions_total", transport="rdma") == sessions + 1


def test_rdma_upgrade_in_clear_is_declined_under_require(required_rdma):
    """L5PG_SSLMODE=disable: l5pgd will not hand out tokens in clear; libpq's own TLS
    connection carries on over TCP."""
    r = rdma_conninfo(required_rdma, L5PG_SSLMODE="disable", PGSSLMODE="require")
    assert r.returncode == 0, r.stderr
    assert "SSL connection" in r.stdout and "42" in r.stdout
    assert not upgraded_rdma(r.stderr)
    assert "the upgrade request came in clear" in required_rdma.log_text()


def test_unverifiable_server_gets_no_upgrade_and_libpq_carries_on(required_rdma, pki):
    """A CA that did not sign l5pgd's certificate: the shim sends nothing to that server,
    opens a fresh connection and libpq connects exactly as it would without the shim."""
    r = rdma_conninfo(required_rdma, L5PG_SSLMODE="verify-full", L5PG_SSLROOTCERT=pki / "client.crt",
                      PGSSLMODE="require")
    assert_fresh_tls_connection(r, "TLS with l5pgd failed")


def test_verify_full_over_an_ipv4_mapped_address(required_rdma, pki):
    """libpq connects an IPv6 socket to ::ffff:127.0.0.1 (l5pgd listens on 127.0.0.1):
    verify-full without L5PG_SSLHOST checks the peer's IPv4 address against the
    certificate's, as it does over an IPv4 socket. Before, the mapped form matched no
    IPv4 entry and the upgrade failed."""
    target = rdma_target(required_rdma, device="soft", host="::ffff:127.0.0.1", L5PG_DEBUG=1,
                         L5PG_SSLMODE="verify-full", L5PG_SSLROOTCERT=pki / "ca.crt")
    r = run(psql_cmd("-c", r"\conninfo", "-c", "select 42"), target, check=False, timeout=60)
    assert r.returncode == 0 and "42" in r.stdout, r.stderr
    assert upgraded_rdma(r.stderr), "\n".join(shim_debug_lines(r.stderr))


def test_require_with_a_root_certificate_verifies_as_libpq_does(required_rdma, pki):
    """L5PG_SSLMODE=require with a root certificate that exists verifies the chain, as
    libpq's sslmode=require does (verify-ca): a CA that did not sign l5pgd's certificate
    gets no upgrade. Before, require never verified."""
    r = rdma_conninfo(required_rdma, L5PG_SSLMODE="require", L5PG_SSLROOTCERT=pki / "client.crt",
                      PGSSLMODE="require")
    assert_fresh_tls_connection(r, "TLS with l5pgd failed")
    # The right CA: upgraded, without a name check (require is verify-ca, not verify-full).
    r = rdma_conninfo(required_rdma, L5PG_SSLMODE="require", L5PG_SSLROOTCERT=pki / "ca.crt",
                      L5PG_SSLHOST="not-the-server")
    assert r.returncode == 0 and "42" in r.stdout, r.stderr
    assert upgraded_rdma(r.stderr), r.stderr


def test_encrypted_client_key_is_not_prompted_for(required_rdma, pki):
    """An L5PG_SSLKEY with a passphrase: OpenSSL's default callback would prompt for it on
    the terminal, or read stdin, inside libpq's send(). It fails to load instead, and the
    connection goes on without the upgrade."""
    encrypted = pki / "client-encrypted.key"
    subprocess.run(["openssl", "pkey", "-in", pki / "client.key", "-aes256", "-passout",
                    "pass:secret", "-out", encrypted], check=True, capture_output=True)
    target = rdma_target(required_rdma, device="soft", L5PG_DEBUG=1, L5PG_SSLMODE="verify-full",
                         L5PG_SSLROOTCERT=pki / "ca.crt", L5PG_SSLCERT=pki / "client.crt",
                         L5PG_SSLKEY=encrypted, PGSSLMODE="require")
    # No terminal (a session of its own) and an empty stdin: the prompt would go to stderr.
    r = run(psql_cmd("-c", r"\conninfo", "-c", "select 42"), target, check=False, timeout=60,
            input="", start_new_session=True)
    assert "pass phrase" not in r.stderr, r.stderr
    assert_fresh_tls_connection(r, "cannot set up TLS")


def test_declined_inside_tls_falls_back_to_a_fresh_connection(required, pki):
    """l5pgd without RDMA declines inside TLS; the connection libpq gets is a new, clean one."""
    r = rdma_conninfo(required, L5PG_SSLMODE="verify-full", L5PG_SSLROOTCERT=pki / "ca.crt",
                      PGSSLMODE="require")
    assert_fresh_tls_connection(r, "declined the RDMA upgrade")


def test_prefer_without_tls_on_l5pgd_upgrades_in_clear(workdir, cluster):
    """The default L5PG_SSLMODE=prefer against an l5pgd without a certificate: SSLRequest,
    'N', then the upgrade as before."""
    with L5pgd(workdir / "l5pgd-rdma-plain", cluster, extra_overrides=rdma_overrides("soft")) as d:
        r = rdma_conninfo(d)
        assert r.returncode == 0, r.stderr
        assert upgraded_rdma(r.stderr), r.stderr
        assert not any("inside TLS" in ln for ln in shim_debug_lines(r.stderr))
        # L5PG_SSLMODE=require will not upgrade in clear: the session stays on TCP.
        r = rdma_conninfo(d, L5PG_SSLMODE="require")
        assert r.returncode == 0 and "42" in r.stdout, r.stderr
        assert not upgraded_rdma(r.stderr)
        assert any("forbids the RDMA upgrade in clear" in ln for ln in shim_debug_lines(r.stderr))
