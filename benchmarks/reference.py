"""Every registered policy on the artifact's workloads 1–4 at loads 0.5–2.0, beside its published results.

Per policy and load: our average JCT per workload, the artifact's (`anchor-results/results-jobload`), the relative
error, and the wall time. Policies the artifact did not publish (fifo) show ours alone.

Run: .venv/bin/python -m benchmarks.reference [--policy NAME ...] [--load 1.0 ...] [--processes 2]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor

from rich.console import Console
from rich.table import Table

from pollux.data.anchors import anchor_average_jct
from pollux.policies.registry import POLICIES, policy_class
from pollux.sim.measured import load_measured_models
from pollux.sim.run import SimConfig, simulate, simulator_options
from pollux.sim.workload import read_workload

LOADS = ("0.5", "1.0", "1.5", "2.0")
WORKLOADS = ("workload-1", "workload-2", "workload-3", "workload-4")
TOLERANCE = 0.10


def workload_name(load: str, workload: str) -> str:
    return workload if load == "1.0" else f"workloads-{load}/{workload}"


def run_one(policy: str, load: str, workload: str) -> tuple[str, str, str, float, float]:
    """(policy, load, workload, our average JCT s, wall s)."""
    models = load_measured_models()
    rows = read_workload(workload_name(load, workload), applications=models).jobs
    cls = policy_class(policy)
    start = time.perf_counter()
    result = simulate(rows, cls(**simulator_options(cls, models)), models, SimConfig())
    return policy, load, workload, result.summary["avg_jct_s"], time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", action="append", default=None)
    parser.add_argument("--load", action="append", default=None, choices=LOADS)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    policies, loads = args.policy or list(POLICIES), args.load or list(LOADS)

    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.processes) as pool:
        jobs = [(p, load, w) for p in policies for load in loads for w in WORKLOADS]
        results = list(pool.map(run_one, *zip(*jobs, strict=True)))
    ours = {(p, load, w): (jct, wall) for p, load, w, jct, wall in results}

    table = Table(title="Average JCT (h): ours / published (relative error), 64 GPUs, 60 s rounds")
    for name in ("policy", "load", *WORKLOADS, "mean", "wall s"):
        table.add_column(name, justify="left" if name == "policy" else "right")
    worst: dict[str, float] = {}
    for policy in policies:
        for load in loads:
            cells, mine, theirs = [], [], []
            for workload in WORKLOADS:
                jct, _ = ours[policy, load, workload]
                published = anchor_average_jct("jobload", f"{policy}-{load}", workload)
                mine.append(jct)
                if published is None:
                    cells.append(f"{jct / 3600:.3f}")
                    continue
                theirs.append(published)
                error = jct / published - 1
                worst[policy] = max(worst.get(policy, 0.0), abs(error))
                cells.append(f"{jct / 3600:.3f} / {published / 3600:.3f} ({error:+.1%})")
            mean = sum(mine) / len(mine) / 3600
            mean_cell = f"{mean:.3f}" + (f" / {sum(theirs) / len(theirs) / 3600:.3f}" if theirs else "")
            wall = sum(ours[policy, load, w][1] for w in WORKLOADS)
            table.add_row(policy, load, *cells, mean_cell, f"{wall:.1f}")
    console = Console(width=160)
    console.print(table)
    for policy, error in worst.items():
        verdict = "within" if error <= TOLERANCE else "OUTSIDE"
        console.print(f"{policy}: worst |relative error| {error:.1%} — {verdict} ±{TOLERANCE:.0%}")
    console.print(f"total wall time {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
