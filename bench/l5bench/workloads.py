"""The pgbench workloads: built-in scripts and the custom scripts they need."""
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

LARGE_RESULT_ROWS = 10_000
PIPELINE_DEPTH = 100

LARGE_READ_SCRIPT = (
    f"\\set a random(1, 100000 * :scale - {LARGE_RESULT_ROWS - 1})\n"
    f"SELECT * FROM pgbench_accounts WHERE aid BETWEEN :a AND :a + {LARGE_RESULT_ROWS - 1};\n")

PIPELINED_READ_SCRIPT = "\n".join(
    [f"\\set aid{i} random(1, 100000 * :scale)" for i in range(PIPELINE_DEPTH)]
    + ["\\startpipeline"]
    + [f"SELECT abalance FROM pgbench_accounts WHERE aid = :aid{i};" for i in range(PIPELINE_DEPTH)]
    + ["\\endpipeline", ""])


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    args: tuple                    # pgbench arguments besides -c/-j/-T and the script file
    statements_per_tx: int         # SQL statements in one pgbench transaction
    script: Optional[str] = None   # custom script text (passed with -f), if any

    def script_path(self, script_dir):
        return Path(script_dir) / f"{self.name}.sql"

    def pgbench_args(self, script_dir):
        """pgbench arguments for this workload (custom scripts are written on demand)."""
        args = list(self.args)
        if self.script is not None:
            path = self.script_path(script_dir)
            if not path.exists():
                path.write_text(self.script)
            args += ["-f", str(path)]
        return args


WORKLOADS = {
    w.name: w for w in (
        Workload("point-read", "point reads: pgbench -S -M prepared", ("-S", "-M", "prepared"), 1),
        Workload("tpcb-like", "default TPC-B-like write transaction: pgbench -M prepared",
                 ("-M", "prepared"), 7),
        Workload("large-read", f"{LARGE_RESULT_ROWS} rows per query (aid range scan), -M prepared",
                 ("-M", "prepared"), 1, LARGE_READ_SCRIPT),
        Workload("pipelined-read",
                 f"{PIPELINE_DEPTH} point reads per \\startpipeline ... \\endpipeline, -M prepared",
                 ("-M", "prepared"), PIPELINE_DEPTH, PIPELINED_READ_SCRIPT),
    )
}


def get(names):
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise ValueError(f"unknown workload(s) {', '.join(unknown)}; "
                         f"choose from {', '.join(WORKLOADS)}")
    return [WORKLOADS[n] for n in names]
