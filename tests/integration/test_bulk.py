"""Large transfers through l5pgd: COPY of >= 100 MB both ways, a 1-million-row result."""
import hashlib
import subprocess

import pytest

from tests.harness.client import popen, psql, psql_cmd, run

COPY_ROWS = 800_000  # ~109 MB of COPY text


@pytest.fixture(scope="session")
def copy_file(workdir):
    """Deterministic COPY text file (id \\t payload); returns (path, sha256, size)."""
    path = workdir / "copy_in.tsv"
    h = hashlib.sha256()
    size = 0
    with open(path, "wb") as f:
        buf = []
        for i in range(1, COPY_ROWS + 1):
            d = hashlib.md5(str(i).encode()).hexdigest()
            buf.append(b"%d\t%s%s%s%s\n" % (i, d.encode(), d[::-1].encode(), d.upper().encode(),
                                              d.encode()))
            if len(buf) == 10_000:
                chunk = b"".join(buf)
                f.write(chunk)
                h.update(chunk)
                size += len(chunk)
                buf = []
        if buf:
            chunk = b"".join(buf)
            f.write(chunk)
            h.update(chunk)
            size += len(chunk)
    assert size >= 100 * 1024 * 1024
    yield path, h.hexdigest(), size
    path.unlink(missing_ok=True)


def stream_sha256(cmd, target, timeout=300):
    """Run cmd through target, hashing stdout as it streams; returns (sha256, bytes, lines)."""
    p = popen(cmd, target)
    h = hashlib.sha256()
    n = 0
    lines = 0
    try:
        while True:
            chunk = p.stdout.read(1 << 20)
            if not chunk:
                break
            h.update(chunk)
            n += len(chunk)
            lines += chunk.count(b"\n")
        err = p.stderr.read().decode(errors="replace")
        rc = p.wait(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert rc == 0, f"{cmd} exited {rc}: {err[-2000:]}"
    return h.hexdigest(), n, lines


@pytest.mark.timeout(420)
def test_copy_round_trip(target, l5pgd, cluster, copy_file):
    path, sha, size = copy_file
    table = f"copy_rt_{target.name}"
    cluster.sql(f"drop table if exists {table}; create unlogged table {table} (id int, payload text)")
    labels_in = dict(transport=target.name, direction="client_to_server")
    labels_out = dict(transport=target.name, direction="server_to_client")
    in_before = l5pgd.metric("l5pg_bytes_total", **labels_in)
    out_before = l5pgd.metric("l5pg_bytes_total", **labels_out)
    try:
        with open(path, "rb") as f:
            r = subprocess.run(psql_cmd("-c", f"COPY {table} FROM STDIN"), stdin=f, env=target.env(),
                               capture_output=True, timeout=300)
        assert r.returncode == 0, r.stderr.decode(errors="replace")
        assert r.stdout.decode().strip() == f"COPY {COPY_ROWS}"
        assert cluster.sql(f"select count(*) from {table}") == str(COPY_ROWS)
        got_sha, got_size, got_lines = stream_sha256(
            psql_cmd("-c", f"COPY (select * from {table} order by id) TO STDOUT"), target)
        assert got_lines == COPY_ROWS
        assert got_size == size
        assert got_sha == sha
    finally:
        cluster.sql(f"drop table if exists {table}")
    in_after = l5pgd.metric("l5pg_bytes_total", **labels_in)
    out_after = l5pgd.metric("l5pg_bytes_total", **labels_out)
    assert in_after - in_before >= size, (in_before, in_after)
    assert out_after - out_before >= size, (out_before, out_after)
    assert out_after >= 100 * 1024 * 1024


MILLION = "select g, md5(g::text) from generate_series(1,1000000) g"


@pytest.fixture(scope="session")
def million_direct(cluster):
    from tests.harness.client import direct_unix_target
    return stream_sha256(psql_cmd("-c", MILLION), direct_unix_target(cluster))


@pytest.mark.timeout(300)
def test_million_rows(target, million_direct):
    sha, size, lines = stream_sha256(psql_cmd("-c", MILLION), target)
    assert lines == 1_000_000
    assert (sha, size) == million_direct[:2]
