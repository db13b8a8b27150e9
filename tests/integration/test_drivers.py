"""Python drivers through l5pgd (run in subprocesses with the target's environment)."""
import pytest

from tests.harness.client import run_python_json

PSYCOPG2 = r'''
import json, psycopg2
conn = psycopg2.connect("")
cur = conn.cursor()
out = {}
cur.execute("select 1+1"); out["sum"] = cur.fetchone()[0]
cur.execute("select %s::text, %s::int, %s::bytea", ("héllo ✓ 🐘", 12345, b"\x00\x01\xff"))
t, i, b = cur.fetchone(); out["params"] = [t, i, bytes(b).hex()]
cur.execute("create temp table d (id int, v text)")
cur.executemany("insert into d values (%s, %s)", [(k, "v%d" % k) for k in range(500)])
cur.execute("select count(*), sum(id), max(v) from d"); out["agg"] = list(cur.fetchone())
conn.commit()
cur.execute("select g from generate_series(1, 20000) g"); out["rows"] = len(cur.fetchall())
try:
    cur.execute("select 1/0")
except psycopg2.Error as e:
    out["error"] = e.pgcode
conn.rollback()
cur.execute("select 7"); out["after_error"] = cur.fetchone()[0]
conn.close()
print(json.dumps(out))
'''

PSYCOPG3 = r'''
import json, psycopg
out = {}
with psycopg.connect("") as conn:
    out["sum"] = conn.execute("select 1+1").fetchone()[0]
    t, i, b = conn.execute("select %s::text, %s::int, %s::bytea", ("héllo ✓ 🐘", 12345, b"\x00\x01\xff")).fetchone()
    out["params"] = [t, i, bytes(b).hex()]
    with conn.cursor() as cur:
        cur.execute("create temp table d (id int, v text)")
        cur.executemany("insert into d values (%s, %s)", [(k, "v%d" % k) for k in range(500)])
        cur.execute("select count(*), sum(id), max(v) from d"); out["agg"] = list(cur.fetchone())
        with cur.copy("copy (select g from generate_series(1, 1000) g) to stdout") as cp:
            out["copy_rows"] = sum(1 for _ in cp.rows())
    with conn.pipeline():
        curs = [conn.execute("select %s::int * 2", (k,)) for k in range(50)]
    out["pipeline"] = sum(c.fetchone()[0] for c in curs)
    out["rows"] = len(conn.execute("select g from generate_series(1, 20000) g").fetchall())
    try:
        conn.execute("select 1/0")
    except psycopg.Error as e:
        out["error"] = e.sqlstate
    conn.rollback()
    out["after_error"] = conn.execute("select 7").fetchone()[0]
print(json.dumps(out))
'''

PSYCOPG3_ASYNC = r'''
import asyncio, json, psycopg

async def one(k):
    async with await psycopg.AsyncConnection.connect("") as conn:
        cur = await conn.execute("select %s::int, pg_backend_pid(), pg_sleep(0.2)", (k,))
        v, pid, _ = await cur.fetchone()
        cur = await conn.execute("select count(*) from generate_series(1, 10000)")
        n = (await cur.fetchone())[0]
        return [v, pid, n]

async def main():
    res = await asyncio.gather(*(one(k) for k in range(5)))
    print(json.dumps({"results": res}))

asyncio.run(main())
'''

EXPECTED_SYNC = {"sum": 2, "params": ["héllo ✓ 🐘", 12345, "0001ff"], "agg": [500, 124750, "v99"],
                 "rows": 20000, "error": "22012", "after_error": 7}


@pytest.mark.timeout(60)
def test_psycopg2(target):
    out, _ = run_python_json(target, PSYCOPG2)
    assert out == EXPECTED_SYNC


@pytest.mark.timeout(60)
def test_psycopg3_sync(target):
    out, _ = run_python_json(target, PSYCOPG3)
    assert out == dict(EXPECTED_SYNC, copy_rows=1000, pipeline=sum(2 * k for k in range(50)))


@pytest.mark.timeout(60)
def test_psycopg3_async(target):
    out, _ = run_python_json(target, PSYCOPG3_ASYNC)
    res = out["results"]
    assert [r[0] for r in res] == list(range(5))
    assert all(r[2] == 10000 for r in res)
    assert len({r[1] for r in res}) == 5  # five distinct backends, one per session
