"""pgbench through l5pgd: exact transaction counts for built-in scripts, query modes, pipelines."""
import pytest

from tests.harness.client import pgbench

T = 200  # transactions per client


def history_count(cluster):
    return int(cluster.sql("select count(*) from pgbench_history"))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("clients,threads", [(1, 1), (8, 2)], ids=["c1", "c8j2"])
def test_select_only_prepared(target, pgbench_db, clients, threads):
    r = pgbench(target, ["-S", "-M", "prepared", "-c", clients, "-j", threads, "-t", T, "-n"])
    assert r.processed == clients * T, r.stdout
    assert r.expected in (None, clients * T)
    assert r.failed == 0, r.stdout
    assert r.tps > 0


@pytest.mark.timeout(240)
@pytest.mark.parametrize("clients,threads", [(1, 1), (8, 2)], ids=["c1", "c8j2"])
def test_tpcb_like(target, pgbench_db, clients, threads):
    before = history_count(pgbench_db)
    r = pgbench(target, ["-c", clients, "-j", threads, "-t", T, "-n"])
    assert r.processed == clients * T, r.stdout
    assert r.failed == 0, r.stdout
    after = history_count(pgbench_db)
    assert after - before == clients * T


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["simple", "extended"])
def test_query_modes(target, pgbench_db, mode):
    r = pgbench(target, ["-S", "-M", mode, "-c", 2, "-t", T, "-n"])
    assert r.processed == 2 * T, r.stdout
    assert r.failed == 0, r.stdout


PIPELINE_SCRIPT = "\n".join(
    [f"\\set aid{i} random(1, 100000 * :scale)" for i in range(10)]
    + ["\\startpipeline"]
    + [f"SELECT abalance FROM pgbench_accounts WHERE aid = :aid{i};" for i in range(10)]
    + ["\\endpipeline", ""])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["extended", "prepared"])
def test_pipeline_script(target, pgbench_db, tmp_path, mode):
    script = tmp_path / "pipeline.sql"
    script.write_text(PIPELINE_SCRIPT)
    r = pgbench(target, ["-f", script, "-M", mode, "-c", 2, "-t", 50, "-n"])
    assert r.processed == 2 * 50, r.stdout
    assert r.failed == 0, r.stdout
