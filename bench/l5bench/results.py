"""results.csv: one row per measured cell, written as the benchmark goes (a partial run keeps
what it measured)."""
import csv
import math

COLUMNS = ["workload", "target", "placement", "clients", "run", "tps", "latency_ms", "cpu_us_per_tx",
           # extra columns, after the required ones
           "cpu_us_client", "cpu_us_proxy", "cpu_us_postgres", "statements_per_tx", "processed",
           "failed_tx", "wall_s", "seq", "status"]


def _fmt(x, digits):
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def row(cell, result, seq):
    ok = result.ok
    return {
        "workload": cell.workload.name, "target": cell.target.name,
        "placement": cell.placement.name, "clients": cell.clients, "run": cell.run,
        "tps": _fmt(result.tps if ok else None, 1),
        "latency_ms": _fmt(result.latency_ms if ok else None, 3),
        "cpu_us_per_tx": _fmt(result.cpu_us_per_tx() if ok else None, 1),
        "cpu_us_client": _fmt(result.cpu_us_per_tx("client") if ok else None, 1),
        "cpu_us_proxy": _fmt(result.cpu_us_per_tx("proxy") if ok else None, 1),
        "cpu_us_postgres": _fmt(result.cpu_us_per_tx("postgres") if ok else None, 1),
        "statements_per_tx": cell.workload.statements_per_tx,
        "processed": result.processed, "failed_tx": result.failed_tx,
        "wall_s": _fmt(result.wall_s, 2), "seq": seq, "status": result.status,
    }


class CsvWriter:
    def __init__(self, path):
        self.path = path
        self._f = open(path, "w", newline="")
        self._w = csv.DictWriter(self._f, fieldnames=COLUMNS, lineterminator="\n")
        self._w.writeheader()
        self._f.flush()

    def write(self, values):
        self._w.writerow(values)
        self._f.flush()

    def close(self):
        self._f.close()


def read(path):
    """Rows of a results.csv with numbers converted; failed cells have None for measurements."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["clients"] = int(r["clients"])
        r["run"] = int(r["run"])
        for k in ("tps", "latency_ms", "cpu_us_per_tx", "cpu_us_client", "cpu_us_proxy",
                  "cpu_us_postgres"):
            r[k] = float(r[k]) if r.get(k) else None
    return rows
