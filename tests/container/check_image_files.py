#!/usr/bin/env python3
"""Runs l5pgd and a shimmed psql from the sidecar image's runtime file set, without a
container engine (`make image-check`; not part of `make test`: it downloads Debian).

The runtime root file system is built the way docker/Dockerfile's second stage builds it:
debootstrap of Debian 12 (minbase), the packages that stage installs (read from the
Dockerfile, so the two cannot drift apart), its l5pg user, the binaries and the config it
copies. Then, in a chroot: ldd finds every library (libibverbs is not installed: RDMA
stays unused), `l5pgd --check` accepts the image's config, l5pgd runs as the image's
user in front of a throwaway Postgres (the host's, its socket bind-mounted where
docker/l5pgd.yaml expects it), and psql from postgresql-client-15 (standing in for the
compose example's app container) runs a query through the shim over shared memory.

Needs root, debootstrap and the Debian mirror. Exit status 0 when every check passed.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.harness.cluster import PgCluster  # noqa: E402
from tests.harness.ports import free_port  # noqa: E402

MIRROR = "http://deb.debian.org/debian"


def log(msg):
    print(f"image-check: {msg}", flush=True)


def run(cmd, **kw):
    kw.setdefault("check", True)
    return subprocess.run([str(c) for c in cmd], **kw)


def runtime_packages(dockerfile):
    """The apt-get install list of the Dockerfile's last stage."""
    text = dockerfile.read_text()
    last_stage = text[text.rindex("\nFROM "):]
    m = re.search(r"apt-get install -y --no-install-recommends(.*?)&&", last_stage, re.S)
    if not m:
        raise SystemExit("cannot find the runtime stage's apt-get install in docker/Dockerfile")
    return m.group(1).replace("\\", " ").split()


def healthcheck_command(dockerfile, metrics_port):
    """The Dockerfile's HEALTHCHECK CMD (exec form), on the port l5pgd serves metrics on here."""
    m = re.search(r"^HEALTHCHECK .*?CMD (\[.*\])$", dockerfile.read_text(), re.M)
    if not m:
        raise SystemExit("cannot find the HEALTHCHECK CMD [...] in docker/Dockerfile")
    return [arg.replace("6439", str(metrics_port)) for arg in json.loads(m.group(1))]


def build_rootfs(rootfs, packages):
    log(f"debootstrap bookworm (minbase) into {rootfs}")
    run(["debootstrap", "--variant=minbase", "bookworm", rootfs, MIRROR], stdout=subprocess.DEVNULL)
    log(f"installing the runtime stage's packages: {' '.join(packages)} (+ postgresql-client-15)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["chroot", rootfs, "apt-get", "update", "-qq"], env=env)
    run(["chroot", rootfs, "apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages,
         "postgresql-client-15"], env=env, stdout=subprocess.DEVNULL)


def install_l5pg(rootfs, build_dir):
    """What the Dockerfile's runtime stage does after apt-get."""
    run(["chroot", rootfs, "sh", "-c",
         "id l5pg >/dev/null 2>&1 || { groupadd --system --gid 999 l5pg && "
         "useradd --system --uid 999 --gid 999 l5pg; }; "
         "mkdir -p /run/l5pg /opt/l5pg /etc/l5pg /run/postgresql && chown l5pg /run/l5pg"])
    for src, dst in ((build_dir / "bin/l5pgd", "usr/local/bin/l5pgd"),
                     (build_dir / "lib/libl5pg.so", "usr/local/lib/libl5pg.so"),
                     (build_dir / "lib/libl5pg.so", "opt/l5pg/libl5pg.so"),
                     (ROOT / "docker/l5pgd.yaml", "etc/l5pg/l5pgd.yaml"),
                     (ROOT / "docker/ident.map", "etc/l5pg/ident.map")):
        shutil.copy2(src, rootfs / dst)


def check_libraries(rootfs):
    for binary in ("/usr/local/bin/l5pgd", "/usr/local/lib/libl5pg.so"):
        out = run(["chroot", rootfs, "ldd", binary], capture_output=True, text=True).stdout
        missing = [ln.strip() for ln in out.splitlines() if "not found" in ln]
        if missing:
            raise SystemExit(f"{binary} needs libraries the image lacks: {missing}")
        if "libibverbs" in out:
            raise SystemExit(f"{binary} links libibverbs (it must load it only for RDMA)")
        log(f"ldd {binary}: every library present, no libibverbs")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default=str(ROOT / "build"))
    ap.add_argument("--rootfs", help="reuse (or keep) this root file system directory")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("image-check needs root (debootstrap, chroot, mount)")
    if not shutil.which("debootstrap"):
        raise SystemExit("image-check needs debootstrap (apt-get install debootstrap)")
    build_dir = Path(args.build_dir)
    work = Path(tempfile.mkdtemp(prefix="l5pg-image-check-", dir="/tmp"))
    os.chmod(work, 0o755)
    rootfs = Path(args.rootfs) if args.rootfs else work / "rootfs"
    if not (rootfs / "usr/bin/apt-get").exists():
        build_rootfs(rootfs, runtime_packages(ROOT / "docker/Dockerfile"))
    install_l5pg(rootfs, build_dir)
    check_libraries(rootfs)

    cluster = PgCluster(work / "pg")
    mounts, l5pgd = [], None
    try:
        cluster.init()
        cluster.start()
        for src, dst in ((cluster.socket_dir, rootfs / "run/postgresql"), ("/proc", rootfs / "proc")):
            run(["mount", "--bind", src, dst])
            mounts.append(dst)
        port, metrics_port = free_port(), free_port()
        while metrics_port == port:
            metrics_port = free_port()
        conf = ["-c", "/etc/l5pg/l5pgd.yaml", "-o", f"upstream.port={cluster.port}",
                "-o", f"listen.port={port}", "-o", "listen.tcp_address=127.0.0.1",
                "-o", f"metrics.listen=127.0.0.1:{metrics_port}"]
        chroot_l5pg = ["chroot", "--userspec=l5pg:l5pg", rootfs, "/usr/local/bin/l5pgd"]
        r = run(chroot_l5pg + ["--check"] + conf, capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise SystemExit(f"l5pgd --check failed in the image's file set:\n{r.stdout}{r.stderr}")
        log(f"l5pgd --check with docker/l5pgd.yaml: {r.stdout.strip()}")
        l5pgd = subprocess.Popen([str(c) for c in chroot_l5pg + conf], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
        socket = rootfs / f"run/l5pg/.s.PGSQL.{port}"
        deadline = time.monotonic() + 20
        while not socket.exists():
            if l5pgd.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"l5pgd did not start:\n{l5pgd.stdout.read()}")
            time.sleep(0.1)
        log("l5pgd runs in the image's file set as user l5pg")
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LD_PRELOAD": "/opt/l5pg/libl5pg.so", "L5PG_DEBUG": "1",
               "PGHOST": "/run/l5pg", "PGPORT": str(port), "PGUSER": "postgres"}
        r = run(["chroot", rootfs, "psql", "-XAt", "-c", "select 'through the image'"], env=env,
                capture_output=True, text=True, check=False)
        if r.returncode != 0 or r.stdout.strip() != "through the image":
            raise SystemExit(f"psql through the shim failed ({r.returncode}):\n{r.stdout}{r.stderr}")
        if "upgraded to shm" not in r.stderr:
            raise SystemExit(f"psql was not upgraded to shared memory:\n{r.stderr}")
        log("psql (postgresql-client-15) through the image's shim: upgraded to shm, query answered")
        health = healthcheck_command(ROOT / "docker/Dockerfile", metrics_port)
        r = run(["chroot", "--userspec=l5pg:l5pg", rootfs] + health, env=env, capture_output=True,
                text=True, check=False)
        if r.returncode != 0:
            raise SystemExit(f"the Dockerfile's HEALTHCHECK failed ({r.returncode}):\n{r.stdout}{r.stderr}")
        log("the Dockerfile's HEALTHCHECK passes against l5pgd (GET /healthz)")
        log("PASS")
    finally:
        if l5pgd is not None and l5pgd.poll() is None:
            l5pgd.send_signal(signal.SIGTERM)
            l5pgd.wait(timeout=30)
        for m in reversed(mounts):
            run(["umount", m], check=False)
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)  # with the root file system unless --rootfs


if __name__ == "__main__":
    main()
