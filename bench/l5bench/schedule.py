"""The order cells run in: targets interleaved, not back to back.

For each repetition, for each placement, workload and client count, every target runs once,
in an order shuffled afresh (seeded, so a run can be reproduced). Repetitions of one cell are
therefore spread over the whole benchmark, and slow drift (other load, thermal, caches) hits
every target alike instead of one target's runs."""
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
        for placement in placements:
            for workload in workloads:
                for c in clients:
                    order = list(targets)
                    rng.shuffle(order)
                    cells += [Cell(run, placement, workload, c, t) for t in order
                              if keep is None or keep(placement, workload.name, c, t.name)]
    return cells
