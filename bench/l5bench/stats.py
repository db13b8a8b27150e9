"""Aggregation of results.csv rows into cells: median and min–max over repetitions."""
import statistics
from dataclasses import dataclass
from typing import Optional

from .targets import DIRECT


@dataclass
class CellStats:
    workload: str
    placement: str
    target: str
    clients: int
    runs_ok: int
    runs_total: int
    tps_median: Optional[float]
    tps_min: Optional[float]
    tps_max: Optional[float]
    latency_median: Optional[float]
    latency_min: Optional[float]
    latency_max: Optional[float]
    cpu_median: Optional[float]
    cpu_client: Optional[float]
    cpu_proxy: Optional[float]
    cpu_postgres: Optional[float]


def _median(values):
    return statistics.median(values) if values else None


def aggregate(rows):
    """{(workload, placement, target, clients): CellStats}."""
    groups = {}
    for r in rows:
        groups.setdefault((r["workload"], r["placement"], r["target"], r["clients"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        ok = [r for r in rs if r["tps"] is not None]
        tps = [r["tps"] for r in ok]
        lat = [r["latency_ms"] for r in ok]
        out[key] = CellStats(
            *key, runs_ok=len(ok), runs_total=len(rs),
            tps_median=_median(tps), tps_min=min(tps, default=None), tps_max=max(tps, default=None),
            latency_median=_median(lat), latency_min=min(lat, default=None),
            latency_max=max(lat, default=None),
            **_cpu_of_median_run(ok))
    return out


def _cpu_of_median_run(ok):
    """CPU per transaction of the run whose total is the median (the lower one of an even
    count), with that run's parts: parts taken as medians of their own would not add up to
    the total they are printed beside."""
    if not ok:
        return dict(cpu_median=None, cpu_client=None, cpu_proxy=None, cpu_postgres=None)
    run = sorted(ok, key=lambda r: r["cpu_us_per_tx"])[(len(ok) - 1) // 2]
    return dict(cpu_median=run["cpu_us_per_tx"], cpu_client=run["cpu_us_client"],
                cpu_proxy=run["cpu_us_proxy"], cpu_postgres=run["cpu_us_postgres"])


def ordered_values(rows, column):
    """Distinct values of a column in order of first appearance (clients sorted numerically)."""
    seen = []
    for r in rows:
        if r[column] not in seen:
            seen.append(r[column])
    return sorted(seen) if column == "clients" else seen


def ratio(stats, key, reference_target):
    """Median tps of key's cell divided by reference_target's in the same workload, placement
    and client count; None when either is missing."""
    w, p, _, c = key
    ref = stats.get((w, p, reference_target, c))
    mine = stats.get(key)
    if not ref or not mine or not ref.tps_median or mine.tps_median is None:
        return None
    return mine.tps_median / ref.tps_median


def best_direct(stats, workload, clients):
    """(tps, "target/placement") of the best direct configuration for a workload and client
    count, over both direct targets and every placement: the yardstick."""
    best = None
    for (w, p, t, c), s in stats.items():
        if w == workload and c == clients and t in DIRECT and s.tps_median:
            if best is None or s.tps_median > best[0]:
                best = (s.tps_median, f"{t}/{p}")
    return best
