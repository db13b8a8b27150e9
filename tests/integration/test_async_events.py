"""LISTEN/NOTIFY delivered to an idle client; query cancel (server side and PQcancel); SIGKILL of
a client in the middle of a transaction."""
import signal
import time
import uuid

import pytest

from tests.harness.cancel import PQCANCEL_SCRIPT, stop_process, wait_for_backend
from tests.harness.client import LineReader, PYTHON, popen, psql_cmd, run_python_json

LISTENER = r'''
import asyncio, sys, psycopg

async def main():
    conn = await psycopg.AsyncConnection.connect("", autocommit=True)
    await conn.execute("LISTEN l5pg_chan")
    print("ready", flush=True)
    n = 0
    async for notify in conn.notifies():
        print("payload:" + notify.payload, flush=True)
        n += 1
        if n == 3:
            break
    await conn.close()
    print("done", flush=True)

asyncio.run(main())
'''


@pytest.mark.timeout(60)
def test_listen_notify(target, cluster):
    p = popen([PYTHON, "-u", "-c", LISTENER], target, text=True)
    try:
        out = LineReader(p.stdout)
        assert out.wait_for(lambda s: s == "ready", 15), (
            f"listener not ready: {out.lines} {p.poll()} {p.stderr.read() if p.poll() is not None else ''}")
        for i in range(3):
            time.sleep(1.0)  # let the listener go idle (and its transport go to sleep)
            payload = f"msg-{i}-{uuid.uuid4().hex[:8]}"
            cluster.sql(f"NOTIFY l5pg_chan, '{payload}'")
            t0 = time.monotonic()
            line = out.wait_for(lambda s: s.startswith("payload:"), 5)
            assert line == f"payload:{payload}", f"after {time.monotonic() - t0:.2f}s: {out.lines}"
        assert out.wait_for(lambda s: s == "done", 5)
        assert p.wait(timeout=5) == 0
    finally:
        stop_process(p)


@pytest.mark.serial  # the cancel seen within 1 s: another test's load could delay it
@pytest.mark.timeout(60)
def test_cancel_backend(target, cluster):
    app = f"l5pg-cancel-{target.name}-{uuid.uuid4().hex[:8]}"
    p = popen(psql_cmd("-c", "select pg_sleep(60)"), target, env={"PGAPPNAME": app}, text=True)
    try:
        pid = wait_for_backend(cluster, app)
        assert cluster.sql(f"select pg_cancel_backend({pid})") == "t"
        t0 = time.monotonic()
        _, err = p.communicate(timeout=10)
        elapsed = time.monotonic() - t0
        assert p.returncode != 0
        assert "canceling statement due to user request" in err, err
        assert elapsed < 1.0, f"client saw the cancel after {elapsed:.2f}s"
    finally:
        stop_process(p)


@pytest.mark.serial  # the cancel seen within 1 s: another test's load could delay it
@pytest.mark.timeout(60)
def test_pqcancel(target):
    out, _ = run_python_json(target, PQCANCEL_SCRIPT, timeout=30)
    assert out["result"] == "canceled", out
    assert "canceling statement due to user request" in out["message"]
    assert out["after_cancel"] < 1.0, out
    assert out["after"] == 5


@pytest.mark.timeout(60)
def test_sigkill_client_rolls_back(target, cluster):
    tag = f"{target.name}-{uuid.uuid4().hex[:8]}"
    app = f"l5pg-kill-{tag}"
    cluster.sql("create table if not exists kill_t (id serial primary key, note text)")
    p = popen(psql_cmd("-f", "-"), target, env={"PGAPPNAME": app}, text=True,
              stdin=__import__("subprocess").PIPE)
    try:
        p.stdin.write(f"insert into kill_t (note) values ('committed-{tag}');\n"
                      "begin;\n"
                      f"insert into kill_t (note) values ('uncommitted-{tag}');\n"
                      "select pg_sleep(600);\n")
        p.stdin.flush()  # stdin stays open: psql keeps waiting for more script
        wait_for_backend(cluster, app)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        deadline = time.monotonic() + 10
        while True:
            n = int(cluster.sql(f"select count(*) from pg_stat_activity where application_name = '{app}'"))
            if n == 0:
                break
            assert time.monotonic() < deadline, f"backend for {app} still there 10s after SIGKILL"
            time.sleep(0.1)
        notes = cluster.sql(f"select note from kill_t where note like '%-{tag}' order by id").splitlines()
        assert notes == [f"committed-{tag}"]
    finally:
        stop_process(p)
