"""systemd/l5pgd.service: `systemd-analyze verify`, the settings issue 18 asks for, its
hardening score, and that its system call filter allows every call l5pgd makes (traced
with strace while it serves SHM, Unix and TCP sessions and reloads)."""
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.harness import paths
from tests.harness.client import psql, shm_target, tcp_target, unix_target
from tests.harness.l5pgd import L5pgd

UNIT = paths.REPO / "systemd" / "l5pgd.service"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
MAX_EXPOSURE = 2.5  # systemd-analyze security: 8.7 before the hardening, 1.8 after

pytestmark = pytest.mark.skipif(
    SYSTEMD_ANALYZE is None,
    reason="systemd-analyze not installed (Debian: apt-get install systemd); unit not checked")


def analyze(*args):
    return subprocess.run([SYSTEMD_ANALYZE, *args], capture_output=True, text=True, timeout=120)


def settings(text):
    """[Service]/[Unit] assignments: key -> list of values (comments dropped)."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "[")) and "=" in line:
            key, value = line.split("=", 1)
            out.setdefault(key, []).append(value)
    return out


@pytest.fixture
def local_unit(tmp_path):
    """The unit with this build's l5pgd, as `cmake --install` rewrites it for its prefix."""
    unit = tmp_path / "l5pgd.service"
    unit.write_text(UNIT.read_text().replace("/usr/bin/l5pgd", str(paths.L5PGD)))
    return unit


def test_unit_verifies(local_unit):
    r = analyze("verify", str(local_unit))
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr


def test_unit_is_notify_with_reload_and_limits():
    s = settings(UNIT.read_text())
    assert s["Type"] == ["notify"]
    assert s["ExecReload"] == [s["ExecStartPre"][0], "/bin/kill -HUP $MAINPID"]
    assert s["ExecStartPre"][0].endswith(" --check")
    assert s["LimitMEMLOCK"] == ["infinity"]
    assert s["WatchdogSec"]
    rw = " ".join(s["ReadWritePaths"]).split()
    assert "-/run/l5pg" in rw and "-/run/postgresql" in rw
    # Documentation= names a file that `cmake --install` and the .deb install.
    doc = s["Documentation"][0]
    assert doc.startswith("file:///usr/share/doc/l5pg/"), doc
    install = (paths.REPO / "cmake" / "install.cmake").read_text()
    name = doc.rsplit("/", 1)[1]
    assert re.search(r"install\(FILES[^)]*/" + re.escape(name) + r"\b[^)]*CMAKE_INSTALL_DOCDIR",
                     install, re.S), f"{name} is not installed to the doc directory"


def test_reload_of_a_file_l5pgd_would_not_take_fails(tmp_path, local_unit):
    """systemctl reload runs the unit's ExecReload= lines in order and fails at the first that
    fails: the check, with l5pgd's error, before any SIGHUP. (Only the SIGHUP was sent:
    l5pgd logged the bad file and kept its configuration, and systemctl said nothing.)"""
    check = settings(local_unit.read_text())["ExecReload"][0].split()
    assert check[1:3] == ["-c", "/etc/l5pg/l5pgd.yaml"], check
    bad = tmp_path / "bad.yaml"
    bad.write_text("listen:\n  port: not-a-port\n")
    r = subprocess.run([check[0], "-c", str(bad), *check[3:]], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0 and "listen.port" in r.stderr, (r.returncode, r.stderr)
    good = paths.REPO / "config" / "l5pgd.example.yaml"
    r = subprocess.run([check[0], "-c", str(good), *check[3:]], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr


def exec_stop_command(unit_text, main_pid):
    """The unit's ExecStop= as systemd runs it: `$$` unescaped to `$`, MAINPID in the
    environment."""
    (line,) = settings(unit_text)["ExecStop"]
    assert line.startswith("/bin/sh -c '") and line.endswith("'"), line
    script = line[len("/bin/sh -c '"):-1].replace("$$", "$")
    return ["/bin/sh", "-c", script], dict(os.environ, MAINPID=str(main_pid))


def test_stop_drains_then_terminates():
    """systemctl stop: SIGINT's drain first (ExecStop waits for it, less than TimeoutStopSec),
    then SIGTERM as the KillSignal, so that clients still connected get their 57P01 instead
    of a SIGKILL."""
    s = settings(UNIT.read_text())
    assert s["KillSignal"] == ["SIGTERM"]
    cmd, _ = exec_stop_command(UNIT.read_text(), 1)
    wait_s = 500 * 0.1
    assert "seq 500" in cmd[2] and "sleep 0.1" in cmd[2]
    assert wait_s < int(s["TimeoutStopSec"][0])


@pytest.mark.timeout(60)
def test_exec_stop_drains_l5pgd(workdir, cluster, l5pgd_binary):
    """The ExecStop script, run as systemd would: l5pgd gets SIGINT, drains its (here no)
    sessions and exits 0, and the script returns once it is gone."""
    d = L5pgd(workdir / "l5pgd-execstop", cluster)
    d.start()
    try:
        cmd, env = exec_stop_command(UNIT.read_text(), d.pid())
        # Reaped at once, as systemd reaps its main process (a zombie still answers kill -0).
        reaper = threading.Thread(target=d.proc.wait, daemon=True)
        reaper.start()
        start = time.monotonic()
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        assert time.monotonic() - start < 20, "the script waited for its whole 50 s"
        reaper.join(5)
        assert d.proc.returncode == 0, d.log_tail()
        assert "SIGINT: new sessions refused" in d.log_text()
    finally:
        d.stop()


def test_security_exposure(local_unit):
    r = analyze("security", "--offline=yes", "--no-pager", str(local_unit))
    if "--offline" in r.stderr and r.returncode != 0:
        pytest.skip(f"systemd-analyze security --offline unsupported here: {r.stderr.strip()}")
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout)
    assert m, r.stdout + r.stderr
    assert float(m.group(1)) <= MAX_EXPOSURE, r.stdout


def expand_filter(group, seen=None):
    """The system call names a `SystemCallFilter=` group allows, nested groups expanded."""
    seen = set() if seen is None else seen
    r = analyze("syscall-filter", "--no-pager", group)
    assert r.returncode == 0, r.stderr
    names = set()
    for line in r.stdout.splitlines()[1:]:
        word = line.strip()
        if not word or word.startswith("#"):
            continue
        if word.startswith("@"):
            if word not in seen:
                seen.add(word)
                names |= expand_filter(word, seen)
        else:
            names.add(word)
    return names


def unit_filter():
    """(allowed, denied) system calls of the unit's SystemCallFilter= lines."""
    allowed, denied = set(), set()
    for value in settings(UNIT.read_text()).get("SystemCallFilter", []):
        deny = value.startswith("~")
        for item in value.lstrip("~").split():
            names = expand_filter(item) if item.startswith("@") else {item}
            (denied if deny else allowed).update(names)
    return allowed, denied


class TracedL5pgd(L5pgd):
    """l5pgd under `strace -f`; stop() signals l5pgd itself, not strace."""

    def __init__(self, *args, trace, **kw):
        super().__init__(*args, **kw)
        self.trace = trace

    def command(self):
        return ["strace", "-f", "-qq", "-o", str(self.trace), "--"] + super().command()

    def pid(self):
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        return int(children[0])

    def stop(self, timeout=10):
        # SIGTERM to strace would only detach it and leave l5pgd running.
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.kill(self.pid(), signal.SIGTERM)
                self.proc.wait(timeout=timeout)
            except (OSError, IndexError, subprocess.TimeoutExpired):
                pass
        return super().stop(timeout)


@pytest.mark.timeout(120)
@pytest.mark.skipif(shutil.which("strace") is None, reason="strace not installed")
def test_syscall_filter_allows_what_l5pgd_calls(workdir, cluster, tmp_path):
    allowed, denied = unit_filter()
    assert allowed, "the unit has no SystemCallFilter= allow list"
    trace = tmp_path / "strace.out"
    d = TracedL5pgd(workdir / "traced", cluster, workers=1, trace=trace,
                    extra_overrides=["workers.cpu_affinity=[0]"])  # sched_setaffinity too
    d.start(timeout=60)
    try:
        for target in (shm_target(d), unix_target(d), tcp_target(d)):
            assert psql(target, "select 1") == "1"
        d.reload()
    finally:
        d.stop(timeout=30)
    time.sleep(0.1)
    used = set(re.findall(r"^\d+\s+(?:<\.\.\. )?([a-z0-9_]+)[( ]", trace.read_text(), re.M))
    blocked = sorted(name for name in used if name not in allowed or name in denied)
    assert not blocked, f"l5pgd calls what SystemCallFilter= refuses: {blocked}"


def test_umask_0077_keeps_socket_and_marker_usable(workdir, cluster):
    """The unit's UMask=0077: the socket (listen.unix_socket_mode) and the marker file the shim
    reads must still be open to every user, or other users' clients silently stay off SHM."""
    old = os.umask(0o077)
    try:
        d = L5pgd(workdir / "umask", cluster, workers=1)
        d.start()
    finally:
        os.umask(old)
    try:
        assert d.socket_path.stat().st_mode & 0o777 == 0o777
        marker = Path(str(d.socket_path) + ".l5pg")
        assert marker.stat().st_mode & 0o777 == 0o644
        assert psql(shm_target(d), "select 1") == "1"
    finally:
        d.stop()
