"""l5pgd names its threads (daemon/thread_name.hpp), so `ps -L`, `top -H` and `perf` tell the
workers and the metrics endpoint apart."""
import os

from tests.harness.l5pgd import L5pgd
from tests.harness.waiting import wait_for

EXPECTED = ["l5pgd", "l5pgd-fd-closer", "l5pgd-metrics", "l5pgd-worker-0", "l5pgd-worker-1",
            "l5pgd-worker-2"]


def thread_names(pid):
    names = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            names.append(f.read().strip())
    return sorted(names)


def test_workers_and_metrics_thread_are_named(workdir, cluster, l5pgd_binary):
    d = L5pgd(workdir / "l5pgd-named", cluster, workers=3)
    d.start()
    try:
        # Each thread names itself once it runs, which may be just after l5pgd listens.
        wait_for(lambda: thread_names(d.proc.pid) == EXPECTED, 5, f"thread names {EXPECTED}")
    finally:
        d.stop()
