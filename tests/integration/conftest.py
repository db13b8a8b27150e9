"""Fixtures for the l5pg integration tests: one PostgreSQL 15 cluster and one l5pgd per session."""
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.harness import paths  # noqa: E402
from tests.harness.client import make_target  # noqa: E402
from tests.harness.cluster import PgCluster  # noqa: E402
from tests.harness.l5pgd import L5pgd  # noqa: E402
from tests.harness.rdma import rdma_overrides  # noqa: E402

DEFAULT_TIMEOUT = 120
TARGETS = ["shm", "tcp"]


def pytest_configure(config):
    config.addinivalue_line("markers", "timeout(seconds): pytest-timeout per-test limit")
    # make test runs the other tests on several pytest workers at once (the Makefile's
    # `integration`), then these alone: what they assert depends on CPUs nobody else uses.
    config.addinivalue_line("markers", "serial: run alone, not beside other tests")


def pytest_collection_modifyitems(config, items):
    # No pytest.ini in our area: give every test without its own marker a default timeout.
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TIMEOUT))


@pytest.fixture(scope="session")
def workdir():
    d = tempfile.mkdtemp(prefix="l5pg-it-", dir="/tmp")
    os.chmod(d, 0o755)
    yield Path(d)
    if not os.environ.get("L5PG_KEEP_TMP"):
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster(workdir):
    c = PgCluster(workdir / "pg")
    try:
        c.start()
    except Exception:
        c.stop()
        raise
    yield c
    c.stop()


@pytest.fixture(scope="session")
def l5pgd_binary():
    if not paths.L5PGD.exists():
        pytest.fail(f"l5pgd binary missing: {paths.L5PGD} — build it (make build) or set "
                    f"L5PG_BUILD_DIR to a build directory containing bin/l5pgd", pytrace=False)
    return paths.L5PGD


@pytest.fixture(scope="session")
def l5pgd(workdir, cluster, l5pgd_binary):
    d = L5pgd(workdir / "l5pgd", cluster, workers=2)
    d.start()
    yield d
    d.stop()


@pytest.fixture(scope="module")
def every_transport_daemon(workdir, cluster, l5pgd_binary, shim, request):
    """A module's own l5pgd serving SHM, plain Unix socket and RDMA (soft) clients, for
    tests over tests.harness.rdma.EVERY_TRANSPORT."""
    d = L5pgd(workdir / f"l5pgd-{request.module.__name__}", cluster, workers=2,
              extra_overrides=rdma_overrides())
    d.start()
    yield d
    d.stop()


@pytest.fixture(scope="session")
def pgbench_db(cluster):
    """pgbench tables at scale 2, initialised once directly against the cluster."""
    import subprocess
    r = subprocess.run([paths.PGBENCH, "-i", "-s", "2", "-q"], env=cluster.env(), capture_output=True,
                       text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"pgbench -i failed: {r.stdout}\n{r.stderr}")
    return cluster


@pytest.fixture(scope="session")
def shim():
    if not paths.SHIM.exists():
        pytest.fail(f"shim missing: {paths.SHIM} — build it (make build) or set L5PG_BUILD_DIR",
                    pytrace=False)
    return paths.SHIM


@pytest.fixture(params=TARGETS)
def target(request, l5pgd):
    if request.param == "shm" and not paths.SHIM.exists():
        pytest.fail(f"shim missing: {paths.SHIM}", pytrace=False)
    return make_target(request.param, l5pgd)


@pytest.fixture(autouse=True)
def _sessions_counted(request):
    """For every test that uses `target`: l5pg_sessions_total{transport=<target>} must grow."""
    if "target" not in request.fixturenames:
        yield
        return
    tgt = request.getfixturevalue("target")
    d = request.getfixturevalue("l5pgd")
    before = d.metric("l5pg_sessions_total", transport=tgt.name)
    yield
    if not d.alive():
        pytest.fail(f"l5pgd died during the test\n{d.log_tail()}", pytrace=False)
    after = d.metric("l5pg_sessions_total", transport=tgt.name)
    assert after > before, (f"l5pg_sessions_total{{transport={tgt.name}}} did not grow "
                            f"({before} -> {after})")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and rep.when in ("call", "teardown"):
        d = item.funcargs.get("l5pgd") if hasattr(item, "funcargs") else None
        if d is not None:
            rep.sections.append(("l5pgd log tail", d.log_tail(30)))
