"""libibverbs is loaded only when the verbs RDMA device is used (issue 18).

The shim is preloaded into every program of a session, and l5pgd runs on hosts without
rdma-core: neither may need libibverbs (and libnl behind it) to start. These tests hide
the library in a private mount namespace (/dev/null bound over it, so dlopen fails as on
a host without libibverbs1) and run SHM and soft-RDMA sessions there; the verbs device
must then say clearly what is missing.
"""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.harness import paths
from tests.harness.client import psql_cmd, run, shim_debug_lines, shm_target, upgraded
from tests.harness.l5pgd import L5pgd
from tests.harness.rdma import rdma_overrides, rdma_target, upgraded_rdma

RDMA_LIBS = ("libibverbs", "librdmacm", "libnl-3", "libnl-route-3")
MISSING = "libibverbs.so.1 not found: install rdma-core's libibverbs1"


def libibverbs_path():
    """The file the dynamic loader opens for libibverbs.so.1, or None if not installed."""
    r = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True)
    for line in r.stdout.splitlines():
        if line.strip().startswith("libibverbs.so.1 ") and "=>" in line:
            return os.path.realpath(line.split("=>")[1].strip())
    return None


# LD_PRELOAD and LD_DEBUG reach only the final program (not unshare, sh or mount):
# they travel as HIDDEN_* and are exported just before the exec.
EXEC_SCRIPT = ('if [ -n "$HIDDEN_LD_PRELOAD" ]; then export LD_PRELOAD="$HIDDEN_LD_PRELOAD"; fi; '
               'if [ -n "$HIDDEN_LD_DEBUG" ]; then export LD_DEBUG="$HIDDEN_LD_DEBUG"; fi; '
               'exec "$@"')


def hidden(cmd):
    """cmd run in a mount namespace where libibverbs.so.1 cannot be loaded. unshare and
    sh exec, so the pid is cmd's own (the harness signals it)."""
    cmd = [str(c) for c in cmd]
    lib = libibverbs_path()
    if lib is None:  # nothing to hide on this host
        return ["sh", "-c", EXEC_SCRIPT, "sh"] + cmd
    return ["unshare", "-m", "sh", "-c", 'mount --bind /dev/null "$1" || exit 99; shift; ' +
            EXEC_SCRIPT, "sh", lib] + cmd


def run_hidden(cmd, target, env):
    """harness run() of cmd under `hidden`, the preload and LD_DEBUG applied to cmd only."""
    full = target.env()
    full.update(env)
    moved = {"LD_PRELOAD": None, "LD_DEBUG": None,
             "HIDDEN_LD_PRELOAD": full.get("LD_PRELOAD", ""),
             "HIDDEN_LD_DEBUG": full.get("LD_DEBUG", "")}
    return run(hidden(cmd), target, env={**env, **moved})


@pytest.fixture(scope="module")
def can_hide():
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    probe = ["/usr/bin/python3", "-c", "import ctypes; ctypes.CDLL('libibverbs.so.1')"]
    r = subprocess.run(hidden(probe), capture_output=True, text=True, timeout=30)
    if libibverbs_path() is None:
        assert r.returncode != 0, "libibverbs.so.1 loads although ldconfig does not know it"
    elif r.returncode == 0:
        pytest.fail(f"hiding libibverbs did not work: {hidden(probe)}")
    elif "libibverbs.so.1" not in r.stderr:  # unshare or mount refused (no CAP_SYS_ADMIN)
        pytest.skip(f"cannot hide libibverbs in a mount namespace here: {r.stderr.strip()}")
    return True


def hidden_l5pgd(base_dir):
    """An l5pgd started through `hidden`: a wrapper script as the harness's binary."""
    base_dir.mkdir(parents=True, exist_ok=True)
    wrapper = base_dir / "l5pgd-without-libibverbs"
    args = " ".join(f"'{a}'" for a in hidden([paths.L5PGD]))
    wrapper.write_text(f'#!/bin/sh\nexec {args} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def maps_libraries(pid):
    return Path(f"/proc/{pid}/maps").read_text()


def test_binaries_are_not_linked_against_rdma_libraries():
    for binary in (paths.SHIM, paths.L5PGD):
        needed = subprocess.run(["readelf", "-d", str(binary)], capture_output=True, text=True,
                                check=True).stdout
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", needed)
        ldd = subprocess.run(["ldd", str(binary)], capture_output=True, text=True,
                             check=True).stdout
        for lib in RDMA_LIBS:
            assert not any(n.startswith(lib + ".") for n in needed), (binary, needed)
            assert lib + "." not in ldd, f"{binary} still pulls in {lib}:\n{ldd}"
        # The verbs device calls libibverbs through a dlopen()ed table, never by symbol.
        undefined = subprocess.run(["nm", "-D", "--undefined-only", str(binary)],
                                   capture_output=True, text=True, check=True).stdout
        assert "ibv_" not in undefined, undefined


@pytest.mark.timeout(60)
def test_shm_session_without_libibverbs(can_hide, l5pgd):
    r = run_hidden(psql_cmd("-c", "select 'shm without verbs'"), shm_target(l5pgd),
                   env={"L5PG_DEBUG": "1", "LD_DEBUG": "libs"})
    assert r.stdout.strip() == "shm without verbs"
    assert "cannot be preloaded" not in r.stderr, r.stderr
    assert upgraded(r.stderr), f"no SHM upgrade:\n{chr(10).join(shim_debug_lines(r.stderr))}"
    loads = [ln for ln in r.stderr.splitlines() if "libibverbs" in ln or "libnl" in ln]
    assert loads == [], "\n".join(loads)


@pytest.mark.timeout(90)
def test_soft_rdma_without_libibverbs(can_hide, workdir, cluster, l5pgd_binary, shim):
    base = workdir / "l5pgd-soft-noverbs"
    d = L5pgd(base, cluster, workers=1, extra_overrides=rdma_overrides("soft"),
              binary=hidden_l5pgd(base))
    d.start()
    try:
        target = rdma_target(d, device="soft")
        r = run_hidden(psql_cmd("-c", "select 'soft rdma', 6 * 7"), target,
                       env={"L5PG_DEBUG": "1"})
        assert r.stdout.strip() == "soft rdma|42"
        assert upgraded_rdma(r.stderr), "\n".join(shim_debug_lines(r.stderr))
        assert d.metric("l5pg_sessions_total", transport="rdma") >= 1
        assert "libibverbs" not in maps_libraries(d.proc.pid)
    finally:
        d.stop()


@pytest.mark.timeout(90)
def test_verbs_device_says_libibverbs_is_missing(can_hide, workdir, cluster, l5pgd_binary, shim):
    base = workdir / "l5pgd-verbs-noverbs"
    d = L5pgd(base, cluster, workers=1, extra_overrides=rdma_overrides("verbs"),
              binary=hidden_l5pgd(base))
    d.start()
    try:
        assert MISSING in d.log_text(), d.log_tail()
        # The client's verbs device fails the same way: no upgrade, the query runs over TCP.
        target = rdma_target(d, device="verbs")
        r = run_hidden(psql_cmd("-c", "select 'still tcp'"), target, env={"L5PG_DEBUG": "1"})
        assert r.stdout.strip() == "still tcp"
        assert not upgraded_rdma(r.stderr)
        assert any(MISSING in ln for ln in shim_debug_lines(r.stderr)), r.stderr
        assert d.metric("l5pg_sessions_total", transport="tcp") >= 1
        # Control, with the library present: asking for verbs does load it (the lazy load
        # happens, and only then), and the missing-library message is not given.
        if libibverbs_path() is not None:
            r = run(psql_cmd("-c", "select 1"), target,
                    env={"L5PG_DEBUG": "1", "LD_DEBUG": "libs"})
            assert r.stdout.strip() == "1"
            assert any("calling init" in ln and "libibverbs.so.1" in ln
                       for ln in r.stderr.splitlines()), r.stderr[-3000:]
            assert MISSING not in r.stderr
    finally:
        d.stop()
