"""upstream.host given as a name: looked up by the worker's resolver while its other sessions
go on, one query for all sessions connecting meanwhile, the answer kept for
upstream.dns_max_ttl_ms, and the name's addresses tried in turn until one connects. l5pgd
runs in a mount namespace whose resolv.conf names a DNS server of the test's own
(tests/harness/dns_server.py)."""
import os
import subprocess
import time

import pytest

from tests.harness.cancel import LONG_QUERY_CANCELLED_ON_REQUEST, stop_process, wait_for_backend
from tests.harness.client import PYTHON, popen, psql, psql_cmd, run, run_python, unix_target
from tests.harness.dns_server import A, DnsServer
from tests.harness import pgwire
from tests.harness.l5pgd import L5pgd

NAME = "pg.l5pg.test"

# A mount namespace (for l5pgd's own resolv.conf) needs root with CAP_SYS_ADMIN, as make
# test runs; elsewhere (a container without it) these tests cannot run at all.
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not DnsServer.can_isolate(),
                                reason="needs a mount namespace (root, CAP_SYS_ADMIN) and a resolv.conf")


class L5pgdBehindDns(L5pgd):
    def __init__(self, base_dir, cluster, dns, overrides=(), **kw):
        kw.setdefault("workers", 1)
        super().__init__(base_dir, cluster,
                         extra_overrides=[f"upstream.host={NAME}", *overrides], **kw)
        self.dns = dns

    def command(self):
        return self.dns.isolated_resolver(self.base_dir / "etc", super().command())


def wait_for(condition, what, timeout=20):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def show_sessions(d):
    out = run(psql_cmd("-d", "l5pgd", "-At", "-c", "SHOW SESSIONS"), unix_target(d),
              timeout=20).stdout
    return out.splitlines()


@pytest.mark.timeout(90)
def test_lookup_does_not_stop_the_worker(workdir, cluster):
    """While the DNS server holds its answer, the worker's one thread still serves the admin
    console, and both clients waiting for the name are answered by one query once it comes.
    (With a blocking getaddrinfo() the console waited, and the lookup timed out first.)"""
    with DnsServer({NAME: ["127.0.0.1"]}) as dns:
        dns.hold()
        with L5pgdBehindDns(workdir / "l5pgd-dns-hold", cluster, dns,
                            ["upstream.connect_timeout_ms=60000"]) as d:
            clients = [popen(psql_cmd("-c", f"select 'waited {i}'"), unix_target(d), text=True)
                       for i in range(2)]
            try:
                wait_for(lambda: dns.count(NAME) >= 1, "no query for the name")

                def waiting():
                    return [r for r in show_sessions(d)
                            if r.split("|")[3:5] == ["postgres", "postgres"]]
                wait_for(lambda: len(waiting()) == 2, "the console did not show both clients")
                assert all(c.poll() is None for c in clients), "a client gave up during the hold"
                dns.release()
                outs = [c.communicate(timeout=30) for c in clients]
            finally:
                for c in clients:
                    c.kill()
            for i, (c, (out, err)) in enumerate(zip(clients, outs)):
                assert c.returncode == 0 and f"waited {i}" in out, err
            assert dns.count(NAME) == 1, dns.queries


@pytest.mark.timeout(60)
def test_answer_kept_for_dns_max_ttl(workdir, cluster):
    """Within upstream.dns_max_ttl_ms a new server connection asks no DNS server; with 0 each
    one does."""
    with DnsServer({NAME: ["127.0.0.1"]}) as dns:
        with L5pgdBehindDns(workdir / "l5pgd-dns-keep", cluster, dns,
                            ["upstream.dns_max_ttl_ms=600000"]) as d:
            for i in range(3):
                assert psql(unix_target(d), f"select {i}") == str(i)
            assert dns.count(NAME) == 1, dns.queries
        with L5pgdBehindDns(workdir / "l5pgd-dns-nokeep", cluster, dns,
                            ["upstream.dns_max_ttl_ms=0"]) as d:
            for i in range(3):
                assert psql(unix_target(d), f"select {i}") == str(i)
            assert dns.count(NAME) == 4, dns.queries


@pytest.mark.timeout(60)
def test_reload_forgets_the_answers_kept(workdir, cluster):
    """However long upstream.dns_max_ttl_ms, a reload makes the next connection ask again
    (an operator who moved the name need not wait for it)."""
    with DnsServer({NAME: ["127.0.0.1"]}) as dns:
        with L5pgdBehindDns(workdir / "l5pgd-dns-reload", cluster, dns,
                            ["upstream.dns_max_ttl_ms=600000"]) as d:
            assert psql(unix_target(d), "select 1") == "1"
            assert psql(unix_target(d), "select 2") == "2"
            assert dns.count(NAME) == 1, dns.queries  # the kept answer
            d.reload()
            assert psql(unix_target(d), "select 3") == "3"
            assert dns.count(NAME) == 2, dns.queries


@pytest.mark.timeout(60)
def test_edited_hosts_file_is_read_again_without_a_reload(workdir, cluster):
    """glibc reads /etc/hosts at every lookup and resolv.conf again once it changed; evdns
    reads them once: l5pgd looks whether either changed before it asks DNS."""
    with DnsServer({NAME: ["127.0.0.1"]}) as dns:
        with L5pgdBehindDns(workdir / "l5pgd-dns-edit", cluster, dns,
                            ["upstream.dns_max_ttl_ms=0"]) as d:
            assert psql(unix_target(d), "select 1") == "1"
            assert dns.count(NAME) == 1, dns.queries
            (d.base_dir / "etc" / "hosts").write_text(f"127.0.0.1 localhost {NAME}\n")
            assert psql(unix_target(d), "select 2") == "2"
            assert dns.count(NAME) == 1, dns.queries  # /etc/hosts answered


@pytest.mark.timeout(60)
def test_addresses_tried_in_turn(workdir, cluster):
    """The name's first address refuses (Postgres listens on 127.0.0.1 only): the next one
    is tried, as libpq does, and the client does not notice; each failure is logged."""
    with DnsServer({NAME: ["127.0.0.2", "127.0.0.3", "127.0.0.1"]}) as dns:
        with L5pgdBehindDns(workdir / "l5pgd-dns-turn", cluster, dns) as d:
            assert psql(unix_target(d), "select 'third'") == "third"
            log = d.log_text()
            for refused in ("127.0.0.2", "127.0.0.3"):
                assert f"upstream connect to {NAME}:{cluster.port} ({refused}) failed: " \
                       "Connection refused; trying the next address" in log, log


@pytest.mark.timeout(60)
def test_name_that_does_not_exist(workdir, cluster):
    """The client and the log say the name could not be looked up, and why, as libpq would;
    the next connection asks again (a failure is not kept)."""
    with DnsServer({}) as dns:
        with L5pgdBehindDns(workdir / "l5pgd-dns-nxdomain", cluster, dns) as d:
            for attempt in (1, 2):
                r = run(psql_cmd("-c", "select 1"), unix_target(d), check=False, timeout=20)
                assert r.returncode != 0
                why = "could not translate the host name to an address: Name or service not known"
                assert f"could not connect to the PostgreSQL server: {why}" in r.stderr, r.stderr
                assert f"upstream connect to {NAME}:{cluster.port} failed: {why}" in d.log_text()
                assert dns.count(NAME) == attempt, dns.queries
            assert d.alive()


@pytest.mark.timeout(60)
def test_name_without_an_address(workdir, cluster):
    """A name DNS knows without an A or AAAA record: said so (evdns tells this no better
    from a server failure or no answer)."""
    with DnsServer({NAME: []}) as dns:
        with L5pgdBehindDns(workdir / "l5pgd-dns-nodata", cluster, dns) as d:
            r = run(psql_cmd("-c", "select 1"), unix_target(d), check=False, timeout=20)
            assert r.returncode != 0
            assert "could not translate the host name to an address: no address from the DNS " \
                   "servers (no answer, a server failure, or no A or AAAA record)" in r.stderr, \
                r.stderr


@pytest.mark.timeout(60)
def test_lookup_timeout(workdir, cluster):
    """A DNS server that does not answer: the client is told within connect_timeout_ms."""
    with DnsServer({NAME: ["127.0.0.1"]}) as dns:
        dns.hold()
        with L5pgdBehindDns(workdir / "l5pgd-dns-timeout", cluster, dns,
                            ["upstream.connect_timeout_ms=500"]) as d:
            r = run(psql_cmd("-c", "select 1"), unix_target(d), check=False, timeout=20)
            assert r.returncode != 0
            assert "could not translate the host name to an address: timeout expired" \
                in r.stderr, r.stderr
            dns.release()
            # The next client joins the query still pending, or finds its answer kept.
            assert psql(unix_target(d), "select 2") == "2"
            assert dns.count(NAME) == 1, dns.queries


@pytest.mark.timeout(60)
def test_client_leaves_during_a_lookup(workdir, cluster):
    """A client that leaves while the name is looked up: its session ends once the answer
    came (it forwards what the client sent, as any departure), the answer is kept for the
    next client, which connects without a query."""
    with DnsServer({NAME: ["127.0.0.1"]}) as dns:
        dns.hold()
        with L5pgdBehindDns(workdir / "l5pgd-dns-leave", cluster, dns,
                            ["upstream.connect_timeout_ms=60000"]) as d:
            client = popen(psql_cmd("-c", "select 1"), unix_target(d), text=True)
            wait_for(lambda: dns.count(NAME) >= 1, "no query for the name")
            client.kill()
            client.wait()

            def others():
                return [r for r in show_sessions(d) if r.split("|")[3] == "postgres"]
            assert len(others()) == 1
            dns.release()
            wait_for(lambda: not others(), "the session of the client that left stayed")
            assert psql(unix_target(d), "select 2") == "2"
            assert dns.count(NAME) == 1, dns.queries
            assert d.alive()


@pytest.mark.timeout(60)
def test_stop_during_a_lookup(workdir, cluster):
    """SIGTERM while a lookup is pending: l5pgd ends at once and cleanly (the query is
    cancelled and freed: the sanitizer builds report no leak), the client is told."""
    with DnsServer({NAME: ["127.0.0.1"]}) as dns:
        dns.hold()
        d = L5pgdBehindDns(workdir / "l5pgd-dns-stop", cluster, dns,
                           ["upstream.connect_timeout_ms=60000"]).start()
        try:
            client = popen(psql_cmd("-c", "select 1"), unix_target(d), text=True)
            try:
                wait_for(lambda: dns.count(NAME) >= 1, "no query for the name")
                assert d.stop() == 0
                _, err = client.communicate(timeout=30)
                assert client.returncode != 0, err
            finally:
                client.kill()
        finally:
            d.stop()
            dns.release()


@pytest.mark.timeout(90)
def test_cancel_on_a_kept_backend_goes_where_it_was_reached(workdir, cluster):
    """The name moves (a failover by DNS) while a kept backend of the old server serves a
    client: the client cancels its statement there, not at the name's new address."""
    app = "l5pg-dns-kept"
    connect_once = ("import sys, psycopg\n"
                    "psycopg.connect(autocommit=True, application_name=sys.argv[1]).close()\n")
    with DnsServer({NAME: ["127.0.0.1"]}) as dns:
        with L5pgdBehindDns(workdir / "l5pgd-dns-cancel", cluster, dns,
                            ["upstream.dns_max_ttl_ms=0", "pool.mode=session"]) as d:
            run_python(unix_target(d), connect_once, [app])
            wait_for(lambda: d.metric("l5pg_pool_idle_connections") == 1, "no backend kept")
            p = popen([PYTHON, "-c", LONG_QUERY_CANCELLED_ON_REQUEST, app], unix_target(d),
                      stdin=subprocess.PIPE, text=True)
            try:
                assert p.stdout.readline().strip() == "started", p.stderr.read()
                wait_for_backend(cluster, app)
                assert d.metric("l5pg_pool_reused_total") == 1
                dns.records[NAME] = ["127.0.0.3"]  # nothing listens there
                p.stdin.write("cancel\n")
                p.stdin.flush()
                assert p.stdout.readline().strip() == "57014", d.log_tail()
                assert p.wait(timeout=20) == 0
            finally:
                stop_process(p)


@pytest.mark.timeout(90)
def test_kept_backends_go_when_the_name_moves(workdir, cluster):
    """A failover by DNS: once a lookup finds an address gone from the name's answer, the
    backends kept from there are closed (they could be an old primary, still running), and
    none reached there is kept any more; an address that stays keeps its backends."""
    app = "l5pg-dns-moved"
    pid_of = ("import sys, psycopg\n"
              "with psycopg.connect(autocommit=True, application_name=sys.argv[1]) as c:\n"
              "    print(c.execute('select pg_backend_pid()').fetchone()[0])\n")
    with DnsServer({NAME: ["127.0.0.1"]}) as dns:
        with L5pgdBehindDns(workdir / "l5pgd-dns-moved", cluster, dns,
                            ["upstream.dns_max_ttl_ms=0", "pool.mode=session"]) as d:
            first = run_python(unix_target(d), pid_of, [app]).stdout.strip()
            wait_for(lambda: d.metric("l5pg_pool_idle_connections") == 1, "no backend kept")
            # An address more is no move: the kept backend stays.
            dns.records[NAME] = ["127.0.0.3", "127.0.0.1"]
            psql(unix_target(d), "select 1", env={"PGAPPNAME": "l5pg-dns-other"})
            wait_for(lambda: d.metric("l5pg_pool_idle_connections") == 2, "both kept")
            assert "lost" not in d.log_text()
            # 127.0.0.1 is gone from the answer (nothing listens at 127.0.0.3): a new
            # connection's lookup finds it out, and both backends kept from there go.
            dns.records[NAME] = ["127.0.0.3"]
            r = run(psql_cmd("-c", "select 1"), unix_target(d), check=False, timeout=30,
                    env={"PGAPPNAME": "l5pg-dns-third"})
            assert r.returncode != 0
            wait_for(lambda: "lost 1 of its addresses: 2 kept server connection(s) there closed"
                     in d.log_text(), "the move noticed")
            assert d.metric("l5pg_pool_idle_connections") == 0
            # 127.0.0.1 back beside 127.0.0.3 (nothing gone, an address back): a new
            # backend, not the old one, and kept again.
            dns.records[NAME] = ["127.0.0.3", "127.0.0.1"]
            again = run_python(unix_target(d), pid_of, [app]).stdout.strip()
            assert again != first, "a backend kept from the old answer was reused"
            assert d.metric("l5pg_pool_reused_total") == 0
            wait_for(lambda: d.metric("l5pg_pool_idle_connections") == 1,
                     "the new backend kept (127.0.0.1 is no longer retired)")


@pytest.mark.timeout(90)
def test_kept_backends_of_every_worker_go_when_the_name_moves(workdir, cluster):
    """Two workers: the move one worker's lookup finds closes the backends the other keeps
    too (each used to learn it from a lookup of its own: only when a client started there,
    and the first such client could still be given a backend of the old server). A client
    goes to the worker with the fewest sessions: one held open in the first worker sends the
    next to the second."""
    with DnsServer({NAME: ["127.0.0.1"]}) as dns:
        with L5pgdBehindDns(workdir / "l5pgd-dns-moved-2", cluster, dns,
                            ["upstream.dns_max_ttl_ms=0", "pool.mode=session"], workers=2) as d:
            holder = pgwire.unix_login(str(d.socket_path), application_name="l5pg-dns-first")
            psql(unix_target(d), "select 1", env={"PGAPPNAME": "l5pg-dns-second"})
            pgwire.terminate(holder)
            holder.close()
            wait_for(lambda: d.metric("l5pg_pool_idle_connections") == 2, "one kept by each")
            dns.records[NAME] = ["127.0.0.3"]  # nothing listens there
            r = run(psql_cmd("-c", "select 1"), unix_target(d), check=False, timeout=30)
            assert r.returncode != 0
            wait_for(lambda: d.metric("l5pg_pool_idle_connections") == 0, "both closed")
            log = d.log_text()
            assert "lost 1 of its addresses: 1 kept server connection(s) there closed" in log
            assert ("1 kept server connection(s) closed: another worker's lookup of "
                    "upstream.host no longer found the address") in log


@pytest.mark.timeout(90)
def test_reuse_refreshes_the_name_and_learns_it_moved(workdir, cluster):
    """Clients that always find a kept backend need no lookup of their own: each reuse
    refreshes the name's answer once it is older than upstream.dns_max_ttl_ms, in the
    background (the login does not wait for DNS), and an answer without the address the
    kept backends were reached at closes them: the next client is not given one."""
    with DnsServer({NAME: ["127.0.0.1"]}) as dns:
        with L5pgdBehindDns(workdir / "l5pgd-dns-reuse", cluster, dns,
                            ["upstream.dns_max_ttl_ms=0", "pool.mode=session",
                             "upstream.connect_timeout_ms=60000"]) as d:
            psql(unix_target(d), "select 1")
            wait_for(lambda: d.metric("l5pg_pool_idle_connections") == 1, "no backend kept")
            asked = len(dns.queries)
            dns.records[NAME] = ["127.0.0.3"]  # the server moved; nothing listens there
            dns.hold()
            try:
                began = time.monotonic()
                assert psql(unix_target(d), "select 1") == "1"
                # Not waiting for the answer (a wait would last connect_timeout_ms, 60 s).
                assert time.monotonic() - began < 30
                assert d.metric("l5pg_pool_reused_total") == 1
                wait_for(lambda: len(dns.queries) > asked, "no lookup at the reuse")
                wait_for(lambda: d.metric("l5pg_pool_idle_connections") == 1, "kept again")
            finally:
                dns.release()
            wait_for(lambda: "lost 1 of its addresses: 1 kept server connection(s) there "
                     "closed" in d.log_text(), "the move noticed")
            assert d.metric("l5pg_pool_idle_connections") == 0
            r = run(psql_cmd("-c", "select 1"), unix_target(d), check=False, timeout=30)
            assert r.returncode != 0, "a backend kept from the old address was reused"
            assert d.metric("l5pg_pool_reused_total") == 1
