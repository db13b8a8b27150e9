"""Configuration reload on SIGHUP and the admin console's RELOAD (README "Operating"): live
keys change under running sessions, keys that need a restart are named and kept, an invalid
file changes nothing."""
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.harness.cancel import LONG_QUERY_CANCELLED_ON_REQUEST, stop_process, wait_for_backend
from tests.harness.client import (PYTHON, Target, pgbench, popen, psql, psql_cmd, run, shm_target,
                                  unix_target)
from tests.harness.l5pgd import L5pgd
from tests.harness.waiting import wait_for

BASE_CONFIG = """\
logging:
  level: info
shm:
  spin_us: 50
  yield_us: 200
"""


def show_config(d):
    """The admin console's SHOW CONFIG: key -> [value, default, changeable]."""
    out = run(psql_cmd("-d", "l5pgd", "-F", "\t", "-c", "SHOW CONFIG"), unix_target(d)).stdout
    return {cols[0]: cols[1:] for cols in (line.split("\t") for line in out.splitlines())}


def debug_lines(text):
    return [ln for ln in text.splitlines() if "[debug]" in ln]


@pytest.fixture
def configured(workdir, cluster):
    """An l5pgd of its own reading a file (logging.level from the file, not -o)."""
    base = Path(tempfile.mkdtemp(prefix="reload-", dir=workdir))  # short: socket path limit
    config = base / "l5pgd.yaml"
    config.write_text(BASE_CONFIG)
    d = L5pgd(base, cluster, workers=2, config_file=config, log_level=None)
    d.start()
    yield d, config
    d.stop()


@pytest.mark.timeout(90)
@pytest.mark.serial  # four SHM sessions spinning for 10 s would crowd the tests beside it
def test_reload_under_pgbench(configured, pgbench_db):
    """Log level and spin budget change while 4 SHM sessions run pgbench -T 10: no error,
    no session dropped, the workers take the new budget, debug lines appear afterwards."""
    d, config = configured
    shm = shm_target(d)
    result = {}
    bench = threading.Thread(target=lambda: result.update(
        r=pgbench(shm, ["-S", "-M", "prepared", "-c", 4, "-j", 2, "-T", 10, "-n"], check=False)))
    bench.start()
    wait_for(lambda: d.metric("l5pg_sessions_active", transport="shm") >= 4, 10,
             "4 SHM sessions")
    assert not debug_lines(d.log_text())
    shm_sessions = d.metric("l5pg_sessions_total", transport="shm")

    config.write_text(BASE_CONFIG.replace("level: info", "level: debug")
                      .replace("spin_us: 50", "spin_us: 5"))
    reload_log = d.reload()
    assert "reload: logging.level: info -> debug" in reload_log
    assert "reload: shm.spin_us: 50 -> 5" in reload_log
    wait_for(lambda: len(re.findall(r"worker \d: new settings \(spin 5 us, yield 200 us\)",
                                    d.log_text())) == 2, 5, "both workers to take the budget")
    assert d.metric("l5pg_sessions_active", transport="shm") >= 4

    bench.join(timeout=60)
    r = result["r"]
    assert r.returncode == 0, r.stderr
    assert r.failed == 0, r.stdout
    assert r.processed > 0
    assert "error" not in r.stderr.lower(), r.stderr
    # pgbench's 4 sessions stayed on shared memory throughout: none was reopened.
    assert d.metric("l5pg_sessions_total", transport="shm") == shm_sessions
    assert d.metric("l5pg_session_errors_total", transport="shm") == 0

    before = len(d.log_text())
    assert psql(unix_target(d), "select 1") == "1"
    assert debug_lines(d.log_text()[before:]), "the new level did not apply to new sessions"


def test_bad_file_keeps_running_configuration(configured):
    """... and says so in its metrics, for an alert: l5pg_config_last_reload_successful is 0
    until a reload takes a file, which also moves the success timestamp."""
    d, config = configured
    loaded_at = d.metric("l5pg_config_last_reload_success_timestamp_seconds")
    assert d.metric("l5pg_config_last_reload_successful") == 1
    assert 0 < time.time() - loaded_at < 3600, loaded_at
    good = config.read_text()
    config.write_text("logging:\n  level: debug\nshm:\n  spin_us: banana\n")
    log = d.reload()
    assert d.metric("l5pg_config_last_reload_successful") == 0
    assert d.metric("l5pg_config_last_reload_success_timestamp_seconds") == loaded_at
    assert re.search(r"reload: invalid configuration, keeping the running one: shm\.spin_us",
                     log), log
    assert d.alive()
    before = len(d.log_text())
    assert psql(unix_target(d), "select 1") == "1"
    assert not debug_lines(d.log_text()[before:]), "logging.level changed by a rejected file"

    # Valid keys naming a certificate that cannot be loaded: rejected as a whole.
    config.write_text("logging:\n  level: debug\ntls:\n  mode: allow\n"
                      "  cert_file: /nonexistent/server.crt\n  key_file: /nonexistent/server.key\n")
    log = d.reload()
    assert "reload: invalid configuration" in log and "/nonexistent/server.crt" in log, log
    assert psql(unix_target(d), "select 1") == "1"

    # Not YAML at all.
    config.write_text("logging: [\n")
    assert "reload: invalid configuration" in d.reload()
    assert psql(shm_target(d), "select 2") == "2"

    # Caught mid-write: no setting at all would reset every key to its default.
    config.write_text("# l5pgd.yaml\n")
    assert "no settings (empty, or only comments)" in d.reload()
    assert d.metric("l5pg_config_last_reload_successful") == 0

    time.sleep(1.1)  # the timestamp counts seconds
    config.write_text(good)
    assert "reload: done" in d.reload()
    assert d.metric("l5pg_config_last_reload_successful") == 1
    assert d.metric("l5pg_config_last_reload_success_timestamp_seconds") > loaded_at


@pytest.mark.timeout(60)
def test_admin_console_reload(configured):
    """RELOAD on the admin console, as PgBouncer's: the reload SIGHUP makes, answered once it
    ran: RELOAD, and a SHOW CONFIG behind it on the same connection shows what it applied;
    a key that needs a restart is a WARNING before it; an invalid file gets an ERROR (F0000)
    saying why, and changes nothing."""
    d, config = configured
    config.write_text(BASE_CONFIG.replace("spin_us: 50", "spin_us: 7"))
    answer = {}

    def console_reload():
        answer["r"] = run(psql_cmd("-d", "l5pgd", "-F", "\t", "-c", "RELOAD", "-c",
                                   "SHOW CONFIG"), unix_target(d), check=False)

    reload_log = d.reload(trigger=console_reload)
    r = answer["r"]
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert r.stdout.splitlines()[0] == "RELOAD", r.stdout
    assert "shm.spin_us\t7\t" in r.stdout, r.stdout
    assert "admin console: RELOAD requested" in reload_log
    assert "reload: shm.spin_us: 50 -> 7" in reload_log

    config.write_text(BASE_CONFIG.replace("spin_us: 50", "spin_us: 7") +
                      "listen:\n  backlog: 17\n")
    r = run(psql_cmd("-d", "l5pgd", "-c", "RELOAD"), unix_target(d))
    assert r.stdout.strip() == "RELOAD"
    assert ("WARNING:  l5pgd: reload: listen.backlog changed (4096 -> 17) but needs a restart: "
            "keeping 4096") in r.stderr, r.stderr

    config.write_text(BASE_CONFIG + "nosuch_section:\n  key: 1\n")
    r = run(psql_cmd("-d", "l5pgd", "-v", "VERBOSITY=verbose", "-c", "RELOAD"), unix_target(d),
            check=False)
    assert r.returncode != 0
    assert "F0000" in r.stderr and "RELOAD failed, the running configuration stays" in r.stderr, \
        r.stderr
    assert "nosuch_section" in r.stderr, r.stderr
    assert show_config(d)["shm.spin_us"][0] == "7"


def test_signals_its_parent_left_blocked_still_work(workdir, cluster):
    """A parent may leave signals blocked for its children (a supervisor's thread, a script):
    l5pgd unblocks those it handles, or it would ignore a reload and a stop for ever. (SIGHUP
    stays held while it starts, until its handler is in place: its default action would end
    l5pgd.)"""
    d = L5pgd(Path(tempfile.mkdtemp(prefix="sigmask-", dir=workdir)), cluster)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP, signal.SIGTERM})
    try:
        d.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    try:
        assert "reload: done" in d.reload()
    finally:
        code = d.stop()
    assert code == 0, "SIGTERM did not stop l5pgd"


def test_pgbouncers_pause_and_resume_signals_leave_it_serving(configured):
    """SIGUSR1 and SIGUSR2 are PgBouncer's PAUSE and RESUME. Their default action ended l5pgd
    at once, every session with it; now it logs them and serves on."""
    d, _ = configured
    with popen(psql_cmd("-c", "select pg_sleep(2)", "-c", "select 'survived'"),
               unix_target(d), text=True) as open_session:
        log0 = len(d.log_text())
        for sig in (signal.SIGUSR1, signal.SIGUSR2):
            os.kill(d.pid(), sig)
        wait_for(lambda: "received SIGUSR2: ignored" in d.log_text()[log0:], 10,
                 "l5pgd to log the signals")
        out, err = open_session.communicate(timeout=30)
    assert open_session.returncode == 0 and "survived" in out, err
    assert "received SIGUSR1: ignored" in d.log_text()[log0:]
    assert d.alive()


def test_restart_keys_are_named_and_kept(configured):
    d, config = configured
    config.write_text(BASE_CONFIG + "listen:\n  backlog: 17\n"
                      "limits:\n  max_startup_per_peer: 7\n")
    log = d.reload()
    assert re.search(r"reload: listen\.backlog changed \(4096 -> 17\) but needs a restart", log), log
    assert "reload: limits.max_startup_per_peer: 100 -> 7" in log
    assert "reload: done" in log
    assert psql(unix_target(d), "select 1") == "1"
    # The admin console shows what runs: the reloaded live key, the restart key's old value.
    config_rows = show_config(d)
    assert config_rows["limits.max_startup_per_peer"] == ["7", "100", "yes"]
    assert config_rows["listen.backlog"] == ["4096", "4096", "no"]
    assert config_rows["shm.spin_us"][:1] == ["50"]  # from the file since the start

    # Nothing changed: files are read again (certificates, ident map), nothing else.
    assert "no key to apply" in d.reload()


def test_reload_warns_when_max_sessions_outgrows_the_fd_limit(configured):
    d, config = configured
    config.write_text(BASE_CONFIG + "limits:\n  max_sessions: 100000000\n")
    log = d.reload()
    assert "reload: limits.max_sessions: 1000 -> 100000000" in log
    # Two descriptors per session, one per startup connection, the closing thread's 317
    # (ForeignFds::kMostHeld), 64 spare; with RDMA off no lingering RDMA channels (a quarter
    # of the sessions, two descriptors each).
    assert re.search(r"open file limit \d+ is below the 200000881 that "
                     r"limits\.max_sessions=100000000 needs \(with "
                     r"limits\.max_startup_sessions=500\); raise it", log), log
    # With pooling, each of the two workers keeps its share of pool.max_idle, rounded up.
    config.write_text(BASE_CONFIG + "limits:\n  max_sessions: 100000000\n"
                      "pool:\n  mode: session\n  max_idle: 999\n")
    log = d.reload()
    assert re.search(r"open file limit \d+ is below the 200001881 that "
                     r"limits\.max_sessions=100000000 needs \(with "
                     r"limits\.max_startup_sessions=500, 1000 kept server connections\); "
                     r"raise it", log), log


def self_signed(d, name):
    """A certificate for 127.0.0.1 that is its own CA (PGSSLROOTCERT=<it>)."""
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", f"/CN={name}", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", f"{name}.key", "-out", f"{name}.crt"],
                       cwd=d, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    (d / f"{name}.key").chmod(0o600)
    return d / f"{name}.crt", d / f"{name}.key"


def tls_config(cert, key):
    return BASE_CONFIG + f"tls:\n  mode: require\n  cert_file: {cert}\n  key_file: {key}\n"


def verify_full(d, root_cert, sql="select 42"):
    target = Target("tcp", "127.0.0.1", d.port,
                    extra={"PGSSLMODE": "verify-full", "PGSSLROOTCERT": str(root_cert)})
    return run(psql_cmd("-c", sql), target, check=False, timeout=60)


def test_tls_certificate_swapped_for_new_sessions(configured, cluster):
    """A renewed certificate: new sessions get it after SIGHUP, an open TLS session goes on."""
    d, config = configured
    old_cert, old_key = self_signed(config.parent, "old")
    new_cert, new_key = self_signed(config.parent, "new")
    config.write_text(tls_config(old_cert, old_key))
    assert "reload: tls.mode: disable -> require" in d.reload()
    assert verify_full(d, old_cert).returncode == 0

    target = Target("tcp", "127.0.0.1", d.port,
                    extra={"PGSSLMODE": "verify-full", "PGSSLROOTCERT": str(old_cert),
                           "PGAPPNAME": "tls-long-running"})
    long_running = popen(psql_cmd("-c", "select pg_sleep(2)", "-c", "select 7"), target, text=True)
    # The session counts as active from accept; only a backend running the query shows that
    # the handshake with the old certificate is over (under TSan it can take a while).
    wait_for(lambda: cluster.sql("select count(*) from pg_stat_activity where application_name"
                                 " = 'tls-long-running' and query like '%pg_sleep%'") == "1",
             20, "the TLS session's query")
    # Same file names, new contents: how certificates are usually renewed.
    old_root = config.parent / "old-root.crt"
    old_root.write_bytes(old_cert.read_bytes())
    old_cert.write_bytes(new_cert.read_bytes())
    old_key.write_bytes(new_key.read_bytes())
    assert "no key to apply" in d.reload()

    out, err = long_running.communicate(timeout=30)
    assert long_running.returncode == 0 and "7" in out, err
    r = verify_full(d, new_cert)
    assert r.returncode == 0, r.stderr
    r = verify_full(d, old_root)
    assert r.returncode != 0 and "certificate verify failed" in r.stderr, r.stderr


@pytest.mark.timeout(90)
@pytest.mark.parametrize("pool", ["none", "session"])
def test_cancel_reaches_the_backends_server_after_upstream_moved(workdir, cluster, pool):
    """A reload points upstream.* at another server (a failover) while a statement runs:
    its cancel still goes where its backend is, not to the new server (there a refused
    connect, or a backend with that pid that is someone else's). Also for a pooled session,
    whose client holds a key of l5pgd's."""
    base = Path(tempfile.mkdtemp(prefix="cancel-", dir=workdir))
    config = base / "l5pgd.yaml"
    config.write_text(f"pool:\n  mode: {pool}\n")
    d = L5pgd(base, cluster, config_file=config)
    d.start()
    app = f"l5pg-moved-{pool}"
    p = popen([PYTHON, "-c", LONG_QUERY_CANCELLED_ON_REQUEST, app], unix_target(d),
              stdin=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "started", p.stderr.read()
        wait_for_backend(cluster, app)
        # Nothing listens on 127.0.0.3 (Postgres listens on 127.0.0.1 and its socket).
        config.write_text(f"pool:\n  mode: {pool}\nupstream:\n  host: 127.0.0.3\n")
        d.reload()
        r = run(psql_cmd("-c", "select 1"), unix_target(d), check=False, timeout=30)
        assert r.returncode != 0 and "could not connect" in r.stderr, r.stderr  # the move took
        p.stdin.write("cancel\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "57014", d.log_tail()  # query_canceled
        assert p.wait(timeout=20) == 0
        assert d.metric("l5pg_cancel_requests_total", result="forwarded") == 1
    finally:
        stop_process(p)
        d.stop()
