"""fork() of a process holding an upgraded (shared-memory) libpq connection: the child must
not be able to use (or corrupt) the parent's session, and the parent keeps working."""
import pytest

from tests.harness.client import run_python_json, shm_target, upgraded

FORK_SCRIPT = r"""
import json, os, signal, sys, time
import psycopg2

mode = sys.argv[1]
conn = psycopg2.connect("")
conn.autocommit = True
cur = conn.cursor()
cur.execute("select pg_backend_pid(), 'before fork'")
backend_pid, before = cur.fetchone()

pid = os.fork()
if pid == 0:
    # Child: never let it hang the test; exit code says what happened.
    signal.alarm(20)
    if mode == "use":
        try:
            cur.execute("select 1")
            cur.fetchone()
        except (psycopg2.OperationalError, psycopg2.InterfaceError) as e:
            sys.stderr.write("child error: %s: %s\n" % (type(e).__name__, e))
            os._exit(0)
        except BaseException as e:
            sys.stderr.write("child unexpected: %r\n" % (e,))
            os._exit(2)
        sys.stderr.write("child: query on the parent's connection succeeded\n")
        os._exit(1)
    os._exit(0)

deadline = time.monotonic() + 30
while True:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    if time.monotonic() > deadline:
        os.kill(pid, signal.SIGKILL)
        done, status = os.waitpid(pid, 0)
        status = -1
        break
    time.sleep(0.01)

results, errors = [], []
for i in range(10):
    try:
        cur.execute("select %s::int * 2, pg_backend_pid(), repeat('z', %s)", (i, 100 * i))
        results.append(list(cur.fetchone()))
    except Exception as e:
        errors.append("%s: %s" % (type(e).__name__, e))
        break
print(json.dumps({"before": before, "backend_pid": backend_pid,
                  "child_status": status,
                  "child_exit": os.WEXITSTATUS(status) if status >= 0 and os.WIFEXITED(status) else None,
                  "child_signal": os.WTERMSIG(status) if status >= 0 and os.WIFSIGNALED(status) else None,
                  "results": results, "errors": errors}))
conn.close()
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["use", "exit"], ids=["child_uses_conn", "child_just_exits"])
def test_fork_with_shm_connection(l5pgd, shim, mode):
    s0 = l5pgd.metric("l5pg_sessions_total", transport="shm")
    a0 = l5pgd.metric("l5pg_upgrades_total", result="accepted")
    out, r = run_python_json(shm_target(l5pgd), FORK_SCRIPT, args=[mode], timeout=50,
                             env={"L5PG_DEBUG": "1"})
    info = f"{out}\n--- stderr ---\n{r.stderr[-3000:]}"
    assert out["before"] == "before fork", info
    assert upgraded(r.stderr), "the connection was not upgraded to shm\n" + info
    assert out["child_status"] != -1, "child hung (killed after 30 s)\n" + info
    assert out["child_signal"] is None, "child died from a signal\n" + info
    if mode == "use":
        assert out["child_exit"] == 0, ("child did not get OperationalError/InterfaceError "
                                        "from the inherited connection\n" + info)
        assert "child error:" in r.stderr, info
    else:
        assert out["child_exit"] == 0, info
    assert out["errors"] == [], "parent's connection broke after the fork\n" + info
    assert len(out["results"]) == 10, info
    for i, (doubled, pid, z) in enumerate(out["results"]):
        assert doubled == 2 * i, info
        assert pid == out["backend_pid"], "parent ended up on a different backend\n" + info
        assert z == "z" * (100 * i), info
    assert l5pgd.metric("l5pg_sessions_total", transport="shm") > s0
    assert l5pgd.metric("l5pg_upgrades_total", result="accepted") > a0, \
        "the connection was not upgraded to shm"
    assert l5pgd.alive()
