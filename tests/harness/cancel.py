"""Helpers for tests that cancel or kill a client in the middle of a query: find the backend
that runs it, stop a client process whatever state it is in, a psycopg2 script that
cancels its own query with PQcancel, and a psycopg one that cancels when told to."""
import time


def wait_for_backend(cluster, appname, timeout=15):
    """pid of the backend running pg_sleep for the given application_name."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = cluster.sql(
            "select pid from pg_stat_activity where application_name = "
            f"'{appname}' and state = 'active' and query like '%pg_sleep%'")
        if pid:
            return int(pid.splitlines()[0])
        time.sleep(0.05)
    raise AssertionError(f"no active backend for application_name={appname}: "
                         + cluster.sql("select application_name, state, query from pg_stat_activity"))


def stop_process(p):
    """Kill p if it still runs and reap it; never raises."""
    if p.poll() is None:
        p.kill()
    try:
        p.wait(timeout=10)
    except Exception:
        pass


# Runs `select pg_sleep(60)` and cancels it from another thread once it runs (PQcancel opens a
# new connection with the backend's key); prints JSON: result ("canceled" expected), seconds
# from the cancel to the error, and the result of a query after the rollback (5).
PQCANCEL_SCRIPT = r'''
import json, threading, time, psycopg2, psycopg2.extensions
conn = psycopg2.connect("")
cur = conn.cursor()
state = {}
def canceller():
    # Cancel once the backend runs the statement (seen from a second session).
    watcher = psycopg2.connect("")
    watcher.autocommit = True
    wcur = watcher.cursor()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        wcur.execute("select count(*) from pg_stat_activity where state = 'active' "
                     "and query = 'select pg_sleep(60)'")
        if wcur.fetchone()[0] > 0:
            break
        time.sleep(0.01)
    watcher.close()
    state["t_cancel"] = time.monotonic()
    conn.cancel()
th = threading.Thread(target=canceller)
th.start()
out = {}
try:
    cur.execute("select pg_sleep(60)")
    out["result"] = "completed"
except psycopg2.extensions.QueryCanceledError as e:
    out["result"] = "canceled"
    out["message"] = str(e)
except Exception as e:
    out["result"] = type(e).__name__
    out["message"] = str(e)
t_end = time.monotonic()
th.join()
out["after_cancel"] = t_end - state["t_cancel"]
conn.rollback()
cur.execute("select 5")
out["after"] = cur.fetchone()[0]
print(json.dumps(out))
'''


# Runs a long statement; on "cancel" from stdin cancels it from a new connection (a
# CancelRequest), then prints how the statement ended.
LONG_QUERY_CANCELLED_ON_REQUEST = r"""
import sys
import psycopg
c = psycopg.connect(autocommit=True, application_name=sys.argv[1])
c.pgconn.send_query(b"select pg_sleep(60)")
while c.pgconn.flush() == 1:
    pass
print("started", flush=True)
sys.stdin.readline()
c.cancel()
r = c.pgconn.get_result()  # blocks until the statement ends
print((r.error_field(psycopg.pq.DiagnosticField.SQLSTATE) or b"none").decode(), flush=True)
while r is not None:
    r = c.pgconn.get_result()
c.close()
"""
