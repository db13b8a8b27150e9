"""PNG plots (matplotlib, Agg): tps, latency and CPU per transaction against clients, one
line per target, one subplot per workload × placement; min–max as error bars."""
from . import stats as st
from .targets import TARGET_NAMES

METRICS = (
    # file, title, (median, min, max) attribute names, y label
    ("tps.png", "Throughput", ("tps_median", "tps_min", "tps_max"), "transactions/s"),
    ("latency.png", "Mean latency", ("latency_median", "latency_min", "latency_max"), "ms"),
    ("cpu_per_tx.png", "CPU per transaction (client + proxy + Postgres)",
     ("cpu_median", None, None), "CPU µs / transaction"),
)
STYLE = {name: (f"C{i}", "os^vD<>pX*h"[i % 11]) for i, name in enumerate(TARGET_NAMES)}


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _series(stats, workload, placement, target, clients, attrs, dodge=1.0):
    """Points of one line; x is multiplied by `dodge` so error bars of targets do not overlap."""
    xs, ys, lo, hi = [], [], [], []
    for c in clients:
        s = stats.get((workload, placement, target, c))
        y = getattr(s, attrs[0]) if s else None
        if y is None:
            continue
        xs.append(c * dodge)
        ys.append(y)
        lo.append(y - getattr(s, attrs[1]) if attrs[1] else 0)
        hi.append(getattr(s, attrs[2]) - y if attrs[2] else 0)
    return xs, ys, [lo, hi]


def _subplot(ax, stats, rows, workload, placement, attrs, ylabel):
    clients = st.ordered_values(rows, "clients")
    present = [t for t in TARGET_NAMES if t in st.ordered_values(rows, "target")]
    plotted = 0
    for i, target in enumerate(present):
        dodge = 2 ** (0.03 * (i - (len(present) - 1) / 2))
        xs, ys, err = _series(stats, workload, placement, target, clients, attrs, dodge)
        if xs:
            color, marker = STYLE[target]
            ax.errorbar(xs, ys, yerr=err, label=target, color=color, marker=marker, capsize=3)
            plotted += 1
    if not plotted:  # e.g. the quick matrix runs the `shared` placement for point reads only
        ax.text(0.5, 0.5, "not measured in this run", transform=ax.transAxes, ha="center",
                va="center", color="gray")
    ax.set_xscale("log", base=2)
    ax.set_xticks(clients)
    ax.set_xticklabels([str(c) for c in clients])
    ax.minorticks_off()
    ax.set_ylim(bottom=0)
    ax.set_title(f"{workload}, {placement}")
    ax.set_xlabel("clients")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)


def plot_metric(plt, out_dir, rows, stats, metric):
    filename, title, attrs, ylabel = metric
    workloads = st.ordered_values(rows, "workload")
    placements = st.ordered_values(rows, "placement")
    height = 4 * len(workloads) + 0.8  # room on top for the title and the legend
    fig, axes = plt.subplots(len(workloads), len(placements), squeeze=False,
                             figsize=(6 * len(placements), height))
    for i, w in enumerate(workloads):
        for j, p in enumerate(placements):
            _subplot(axes[i][j], stats, rows, w, p, attrs, ylabel)
    legend = {}  # label -> handle, over every subplot (some may lack a target)
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    handles, labels = list(legend.values()), list(legend.keys())
    fig.suptitle(title, y=1 - 0.1 / height, va="top")
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 1 - 0.4 / height),
               ncol=min(len(labels), 4) or 1, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - (0.6 if len(labels) <= 4 else 0.85) / height))
    fig.savefig(out_dir / filename, dpi=100)
    plt.close(fig)
    return filename


def write_all(out_dir, rows):
    """Write every plot into out_dir; returns the file names."""
    plt = _pyplot()
    stats = st.aggregate(rows)
    return [plot_metric(plt, out_dir, rows, stats, m) for m in METRICS]
