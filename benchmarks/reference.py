"""Our simulator beside the Pollux artifact's published results, experiment by experiment.

- `jobload`: every registered policy on workloads 1–4 at loads 0.5–2.0 (`anchor-results/results-jobload`).
- `period`: Pollux with scheduling intervals 30 s – 8 min on workloads 1–4 (`results-period`).
- `inter`: Pollux with interference avoidance on / off and 25% / 50% slowdown of distributed jobs sharing a node
  (`results-inter`).
Per row: our average JCT per workload, the published one, the relative error, and the wall time. Policies or
variants the artifact did not publish show ours alone.

Run: .venv/bin/python -m benchmarks.reference [--experiment jobload|period|inter ...] [--policy NAME ...]
     [--load 1.0 ...] [--processes 2]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table

from pollux.data.anchors import anchor_average_jct
from pollux.policies.registry import POLICIES
from pollux.sim.measured import load_measured_models
from pollux.sim.run import SimConfig, simulate, simulated_policy
from pollux.sim.workload import read_workload

LOADS = ("0.5", "1.0", "1.5", "2.0")
WORKLOADS = ("workload-1", "workload-2", "workload-3", "workload-4")
TOLERANCE = 0.10


@dataclass(frozen=True)
class Variant:
    """One row: a policy with options on a load, and where its published numbers are."""

    label: str
    policy: str
    load: str = "1.0"
    options: dict[str, object] = field(default_factory=dict)
    interval_s: int = 60
    interference: float = 0.0
    anchor: tuple[str, str] | None = None  # (experiment, variant) under anchor-results/

    def workload(self, name: str) -> str:
        return name if self.load == "1.0" else f"workloads-{self.load}/{name}"


def experiments(policies: list[str], loads: list[str]) -> dict[str, list[Variant]]:
    periods = {"30s": 30, "1m": 60, "2m": 120, "4m": 240, "8m": 480}
    return {
        "jobload": [
            Variant(f"{p} load {load}", p, load, anchor=("jobload", f"{p}-{load}")) for p in policies for load in loads
        ],
        "period": [
            Variant(f"pollux every {name}", "pollux", interval_s=s, anchor=("period", f"pollux-{name}"))
            for name, s in periods.items()
        ],
        "inter": [
            Variant("pollux avoid", "pollux", anchor=("inter", "avoid")),
            Variant("pollux no-avoid", "pollux", options={"avoid_interference": False}, anchor=("inter", "noavoid")),
            Variant(
                "pollux no-avoid, 25% slowdown",
                "pollux",
                options={"avoid_interference": False},
                interference=0.25,
                anchor=("inter", "inter25"),
            ),
            Variant(
                "pollux no-avoid, 50% slowdown",
                "pollux",
                options={"avoid_interference": False},
                interference=0.5,
                anchor=("inter", "inter50"),
            ),
        ],
    }


def run_one(variant: Variant, workload: str) -> tuple[float, float]:
    """(our average JCT s, wall s) of one variant on one workload."""
    models = load_measured_models()
    rows = read_workload(variant.workload(workload), applications=models).jobs
    config = SimConfig(interval_s=variant.interval_s, interference=variant.interference)
    policy = simulated_policy(variant.policy, config, models, **variant.options)
    start = time.perf_counter()
    result = simulate(rows, policy, models, config)
    return result.summary["avg_jct_s"], time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", action="append", default=None, choices=("jobload", "period", "inter"))
    parser.add_argument("--policy", action="append", default=None)
    parser.add_argument("--load", action="append", default=None, choices=LOADS)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    chosen = experiments(args.policy or list(POLICIES), args.load or list(LOADS))
    names = args.experiment or list(chosen)

    started = time.perf_counter()
    console = Console(width=170)
    with ProcessPoolExecutor(max_workers=args.processes) as pool:
        for name in names:
            variants = chosen[name]
            tasks = [(v, w) for v in variants for w in WORKLOADS]
            outcomes = list(pool.map(run_one, *zip(*tasks, strict=True)))
            results = {(id(v), w): outcome for (v, w), outcome in zip(tasks, outcomes, strict=True)}
            table = Table(title=f"{name}: average JCT (h), ours / published (relative error), 64 GPUs")
            for column in ("variant", *WORKLOADS, "mean", "wall s"):
                table.add_column(column, justify="left" if column == "variant" else "right")
            worst: dict[str, float] = {}
            for v in variants:
                cells, mine, theirs = [], [], []
                for w in WORKLOADS:
                    jct, _ = results[id(v), w]
                    published = anchor_average_jct(*v.anchor, w) if v.anchor else None
                    mine.append(jct)
                    if published is None:
                        cells.append(f"{jct / 3600:.3f}")
                        continue
                    theirs.append(published)
                    error = jct / published - 1
                    worst[v.policy] = max(worst.get(v.policy, 0.0), abs(error))
                    cells.append(f"{jct / 3600:.3f} / {published / 3600:.3f} ({error:+.1%})")
                mean = sum(mine) / len(mine) / 3600
                mean_cell = f"{mean:.3f}"
                if theirs:
                    published_mean = sum(theirs) / len(theirs) / 3600
                    mean_cell += f" / {published_mean:.3f} ({mean / published_mean - 1:+.1%})"
                table.add_row(v.label, *cells, mean_cell, f"{sum(results[id(v), w][1] for w in WORKLOADS):.1f}")
            console.print(table)
            for policy, error in worst.items():
                verdict = "within" if error <= TOLERANCE else "OUTSIDE"
                console.print(f"{name}/{policy}: worst per-workload |relative error| {error:.1%} — {verdict} ±10%")
    console.print(f"total wall time {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
