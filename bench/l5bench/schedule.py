"""The order cells run in: targets interleaved, not back to back.

For each repetition, workload and client count, every (placement, target) pair runs once, in
an order shuffled afresh (seeded, so a run can be reproduced). Repetitions of one cell are
therefore spread over the whole benchmark, and slow drift (other load, thermal, caches, the
autovacuum a tpcb-like block leaves behind) hits every target and placement alike instead of
one target's runs or one placement's block: ratios across placements ("vs the best direct
configuration") compare cells minutes apart at most, like ratios across targets. The server
side's affinity is set again whenever the placement changes (runner.run_matrix)."""
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Cell:
    run: int
    placement: object  # placement.Placement
    workload: object   # workloads.Workload
    clients: int
    target: object     # targets.BenchTarget


def build(runs, placements, workloads, clients, targets, seed, keep=None):
    """keep(placement, workload name, clients, target name) -> bool drops cells (None: all)."""
    rng = random.Random(seed)
    cells = []
    for run in range(1, runs + 1):
        for workload in workloads:
            for c in clients:
                order = [(p, t) for p in placements for t in targets]
                rng.shuffle(order)
                cells += [Cell(run, p, workload, c, t) for p, t in order
                          if keep is None or keep(p, workload.name, c, t.name)]
    return cells
