"""The Debian package (`make package`, CPack DEB) of the build under test (issue 18).

Runs cpack on the existing build directory (no rebuild; a few seconds), then checks the
.deb without installing it into this system: its control data (Depends computed by
dpkg-shlibdeps, no libibverbs), its file list and conffile, that apt finds every
Depends satisfied on this host (a simulated install), and that l5pgd unpacked from it (dpkg -x) runs `--check` on the
configuration the package ships. Also `cmake --install` into a DESTDIR keeps an edited
/etc/l5pg/l5pgd.yaml.
"""
import os
import re
import shutil
import subprocess

import pytest

from tests.harness import paths

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="packaging test runs as root (file ownership)"),
    pytest.mark.skipif(not all(shutil.which(t) for t in ("cpack", "dpkg-deb", "dpkg-shlibdeps", "apt-get")),
                       reason="needs cmake's cpack and dpkg-dev (dpkg-shlibdeps)"),
]

EXPECTED_FILES = ["./usr/bin/l5pgd", "./usr/lib/libl5pg.so", "./usr/include/l5pg.h",
                  "./usr/lib/systemd/system/l5pgd.service", "./etc/l5pg/l5pgd.yaml",
                  "./usr/share/doc/l5pg/README.md", "./usr/share/doc/l5pg/l5pgd.example.yaml"]
# What the binaries link against: dpkg-shlibdeps must name these packages.
NEEDED = ["libevent-core-2.1-7", "libevent-extra-2.1-7", "libevent-pthreads-2.1-7",
          "libyaml-cpp0.7", "libspdlog1", "libfmt9", "libssl3", "libc6",
          "libgcc-s1"]  # the shim: the unwinder pthread_cancel() uses (clientlib/CMakeLists.txt)


def project_version():
    text = (paths.REPO / "CMakeLists.txt").read_text()
    return re.search(r"project\(l5pg VERSION ([0-9.]+)", text).group(1)


def field(info, name):
    m = re.search(rf"^ {name}: (.*)$", info, re.M)
    return m.group(1) if m else ""


@pytest.fixture(scope="module")
def deb(tmp_path_factory):
    config = paths.BUILD_DIR / "CPackConfig.cmake"
    if not config.exists():
        pytest.fail(f"{config} missing: configure the build (make build)", pytrace=False)
    out = tmp_path_factory.mktemp("package")
    r = subprocess.run(["cpack", "--config", str(config), "-G", "DEB", "-B", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    debs = list(out.glob("*.deb"))
    assert len(debs) == 1, (debs, r.stdout)
    return debs[0]


@pytest.mark.timeout(300)
def test_control_fields(deb):
    info = subprocess.run(["dpkg-deb", "-I", str(deb)], capture_output=True, text=True,
                          check=True).stdout
    assert field(info, "Package") == "l5pg"
    assert field(info, "Version") == project_version()
    depends = field(info, "Depends")
    names = [d.strip().split()[0] for d in depends.split(",")]
    for needed in NEEDED:
        assert any(n.startswith(needed) for n in names), f"{needed} not in Depends: {depends}"
    # The unit's User=postgres comes from postgresql-common, as for Debian's pgbouncer.
    assert "postgresql-common" in names, depends
    for rdma in ("libibverbs", "librdmacm", "libnl", "rdma-core"):
        assert rdma not in depends, f"Depends names {rdma}: {depends}"
    assert "libibverbs1" in field(info, "Suggests") + field(info, "Recommends")
    # Every dependency is installed here: apt would install nothing but l5pg itself.
    r = subprocess.run(["apt-get", "-s", "-o", "Debug::NoLocking=1", "install", str(deb)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"^0 upgraded, 1 newly installed, 0 to remove", r.stdout, re.M), r.stdout
    assert re.search(r"^Inst l5pg ", r.stdout, re.M) and \
        len(re.findall(r"^Inst ", r.stdout, re.M)) == 1, r.stdout


@pytest.mark.timeout(300)
def test_unpacked_package_runs(deb, tmp_path):
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True,
                             check=True).stdout
    files = [ln.split()[-1] for ln in listing.splitlines()]
    for f in EXPECTED_FILES:
        assert f in files, f"{f} not in the package:\n{listing}"
    assert not any("/work/" in f or "_CPack_Packages" in f for f in files), listing
    root = tmp_path / "root"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    # The configuration is a conffile: dpkg keeps an operator's edits on upgrade.
    subprocess.run(["dpkg-deb", "-e", str(deb), str(tmp_path / "DEBIAN")], check=True)
    assert (tmp_path / "DEBIAN" / "conffiles").read_text().split() == ["/etc/l5pg/l5pgd.yaml"]
    l5pgd = root / "usr/bin/l5pgd"
    ldd = subprocess.run(["ldd", str(l5pgd)], capture_output=True, text=True, check=True).stdout
    assert "not found" not in ldd and "libibverbs" not in ldd, ldd
    r = subprocess.run([str(l5pgd), "--version"], capture_output=True, text=True, timeout=10)
    assert r.stdout.strip() == f"l5pgd {project_version()}", r.stdout + r.stderr
    r = subprocess.run([str(l5pgd), "-c", str(root / "etc/l5pg/l5pgd.yaml"), "--check"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stdout + r.stderr
    # The shim from the package says its version in its debug line.
    r = subprocess.run(["/bin/true"], capture_output=True, text=True, timeout=10,
                       env={"LD_PRELOAD": str(root / "usr/lib/libl5pg.so"), "L5PG_DEBUG": "1",
                            "PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    assert f"libl5pg {project_version()} loaded" in r.stderr, r.stderr
    # The unit starts what the package installs.
    unit = (root / "usr/lib/systemd/system/l5pgd.service").read_text()
    for exec_line in re.findall(r"^ExecStart(?:Pre)?=(\S+)", unit, re.M):
        assert (root / exec_line.lstrip("/")).exists(), exec_line


# What each maintainer script asks of a running systemd, called as dpkg calls it:
# (arguments, the commands it runs). A first install enables and starts nothing (l5pgd
# needs configuring first).
SCRIPT_CALLS = [
    ("postinst", ["configure", ""], ["systemctl --system daemon-reload"]),
    ("postinst", ["configure", "0.1.0"],
     ["systemctl --system daemon-reload", "deb-systemd-invoke try-restart l5pgd.service"]),
    ("prerm", ["remove"], ["deb-systemd-invoke stop l5pgd.service"]),
    ("prerm", ["upgrade", "9.9.9"], []),
    ("postrm", ["remove"], ["systemctl --system daemon-reload"]),
]
WANTS_LINK = "etc/systemd/system/multi-user.target.wants/l5pgd.service"


def run_script(path, args, root, stubs):
    """`path args` in a mount namespace whose /run has a systemd directory (as on a booted
    host), systemctl and deb-systemd-invoke replaced by recorders, and the real
    deb-systemd-helper working on `root` (DPKG_ROOT when given: then the scripts leave the
    running systemd alone, as dh's do)."""
    env = {"PATH": f"{stubs}:/usr/sbin:/usr/bin:/sbin:/bin",
           "DPKG_MAINTSCRIPT_PACKAGE": "l5pg", "DPKG_MAINTSCRIPT_NAME": path.name}
    if root is not None:
        env["DPKG_ROOT"] = str(root)
    return subprocess.run(
        ["unshare", "--mount", "--", "sh", "-c",
         'mount -t tmpfs none /run && mkdir -p /run/systemd/system && exec "$@"', "sh",
         str(path), *args],
        capture_output=True, text=True, timeout=30, env=env)


@pytest.mark.timeout(120)
def test_maintainer_scripts_drive_systemd(deb, tmp_path):
    control = tmp_path / "DEBIAN"
    subprocess.run(["dpkg-deb", "-e", str(deb), str(control)], check=True)
    root = tmp_path / "root"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    log = tmp_path / "calls"
    for tool in ("systemctl", "deb-systemd-invoke"):
        (stubs / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {log}\n')
        (stubs / tool).chmod(0o755)
    for script, args, expected in SCRIPT_CALLS:
        path = control / script
        assert path.stat().st_mode & 0o777 == 0o755, script
        for dpkg_root, calls in ((None, expected), (root, [])):
            log.write_text("")
            r = run_script(path, args, dpkg_root, stubs)
            assert r.returncode == 0, (script, args, r.stderr)
            assert log.read_text().splitlines() == calls, (script, args, dpkg_root)
    # The operator enables it (`systemctl enable l5pgd`); a purge removes that link, so that
    # a later install does not come back enabled.
    assert not (root / WANTS_LINK).exists()  # configure enabled nothing
    (root / WANTS_LINK).parent.mkdir(parents=True, exist_ok=True)
    (root / WANTS_LINK).symlink_to("/usr/lib/systemd/system/l5pgd.service")
    r = run_script(control / "postrm", ["purge"], root, stubs)
    assert r.returncode == 0, r.stderr
    assert not (root / WANTS_LINK).is_symlink(), "the purge left the service enabled"


@pytest.mark.timeout(120)
def test_cmake_install_keeps_an_edited_config(tmp_path):
    dest = tmp_path / "dest"
    env = dict(os.environ, DESTDIR=str(dest))
    subprocess.run(["cmake", "--install", str(paths.BUILD_DIR), "--prefix", "/usr/local"],
                   env=env, check=True, capture_output=True, timeout=60)
    conf = dest / "etc/l5pg/l5pgd.yaml"
    assert conf.read_text() == (paths.REPO / "config/l5pgd.example.yaml").read_text()
    assert (dest / "usr/local/bin/l5pgd").exists()
    assert (dest / "usr/local/lib/libl5pg.so").exists()
    unit = (dest / "usr/local/lib/systemd/system/l5pgd.service").read_text()
    assert re.findall(r"^ExecStart=(\S+)", unit, re.M) == ["/usr/local/bin/l5pgd"], unit
    conf.write_text(conf.read_text() + "# edited by the operator\n")
    r = subprocess.run(["cmake", "--install", str(paths.BUILD_DIR), "--prefix", "/usr/local"],
                       env=env, check=True, capture_output=True, text=True, timeout=60)
    assert "Keeping existing" in r.stdout, r.stdout
    assert conf.read_text().endswith("# edited by the operator\n")
