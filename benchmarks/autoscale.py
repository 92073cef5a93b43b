"""Cloud auto-scaling (Pollux §5.4): node-hours and average JCT of a fixed 16-node cluster against Pollux's
autoscaling between 1-16 and 1-32 nodes, on the artifact's workloads (4 T4 GPUs a node, 60 s rounds).

Node-hours are billed from each workload's first submission to its last completion (booting nodes included); the
goal is fewer node-hours at no more than 10% longer average JCT.

Run: .venv/bin/python -m benchmarks.autoscale [--workloads 4] [--policy pollux] [--boot-time 0] [--processes 1]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
from rich.console import Console
from rich.table import Table

from pollux.autoscale import AutoscaleSettings
from pollux.cluster import Cluster
from pollux.sim.metrics import billing_window, node_hours
from pollux.sim.run import SimConfig

FIXED_NODES = 16
CONFIGS: dict[str, tuple[int, int] | None] = {"fixed 16": None, "auto 1-16": (1, 16), "auto 1-32": (1, 32)}
JCT_SLACK = 0.10  # the acceptance line: at most 10% longer average JCT


@dataclass(frozen=True)
class Outcome:
    workload: str
    config: str
    node_hours: float
    avg_jct_s: float
    makespan_s: float
    nodes_mean: float
    wall_s: float


def run_one(workload: str, config_name: str, policy_name: str, boot_time_s: float) -> Outcome:
    """One simulation (in a worker process): `workload` under `policy_name` on the named cluster configuration."""
    from pollux.sim.measured import load_measured_models
    from pollux.sim.run import simulate, simulated_policy
    from pollux.sim.workload import read_workload

    bounds = CONFIGS[config_name]
    autoscale = None if bounds is None else AutoscaleSettings(*bounds)
    config = SimConfig(cluster=Cluster(FIXED_NODES, 4), autoscale=autoscale, boot_time_s=boot_time_s)
    models = load_measured_models()
    rows = read_workload(workload, applications=models).jobs
    result = simulate(rows, simulated_policy(policy_name, config, models), models, config)
    summary = result.summary
    start, end = billing_window(result.jobs)
    hours = summary["node_hours"] if autoscale else node_hours([(0.0, FIXED_NODES)], start, end)
    nodes = summary["nodes_mean"] if autoscale else float(FIXED_NODES)
    return Outcome(workload, config_name, hours, summary["avg_jct_s"], summary["makespan_s"], nodes, result.wall_s)


def change(value: float, base: float) -> str:
    return f"{100 * (value / base - 1):+.1f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=4, help="workload-1..N of the artifact (1-4)")
    parser.add_argument("--policy", default="pollux")
    parser.add_argument("--boot-time", type=float, default=0.0, help="seconds before a node added is usable")
    parser.add_argument("--processes", type=int, default=1, help="simulations at once")
    args = parser.parse_args()
    workloads = [f"workload-{i}" for i in range(1, args.workloads + 1)]
    jobs = [(w, c) for w in workloads for c in CONFIGS]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(args.processes, 1)) as pool:
        futures = [pool.submit(run_one, w, c, args.policy, args.boot_time) for w, c in jobs]
        outcomes = {(o.workload, o.config): o for o in (f.result() for f in futures)}

    table = Table(
        title=f"{args.policy}: fixed {FIXED_NODES} nodes vs autoscaled (4 T4 GPUs a node, boot {args.boot_time:g} s)"
    )
    for name in (
        "workload",
        "cluster",
        "node-hours",
        "vs fixed",
        "avg JCT h",
        "vs fixed",
        "makespan h",
        "nodes",
        "wall s",
    ):
        table.add_column(name, justify="left" if name in ("workload", "cluster") else "right")
    means: dict[str, dict[str, float]] = {}
    for config in CONFIGS:
        rows = [outcomes[w, config] for w in workloads]
        means[config] = {
            "node_hours": float(np.mean([o.node_hours for o in rows])),
            "avg_jct_s": float(np.mean([o.avg_jct_s for o in rows])),
        }
    for workload in [*workloads, "mean"]:
        fixed = means["fixed 16"] if workload == "mean" else vars(outcomes[workload, "fixed 16"])
        for config in CONFIGS:
            if workload == "mean":
                hours, jct = means[config]["node_hours"], means[config]["avg_jct_s"]
                makespan = nodes = wall = ""
            else:
                o = outcomes[workload, config]
                hours, jct = o.node_hours, o.avg_jct_s
                makespan, nodes, wall = f"{o.makespan_s / 3600:.1f}", f"{o.nodes_mean:.1f}", f"{o.wall_s:.0f}"
            same = config == "fixed 16"
            table.add_row(
                workload if same else "",
                config,
                f"{hours:.0f}",
                "" if same else change(hours, fixed["node_hours"]),
                f"{jct / 3600:.2f}",
                "" if same else change(jct, fixed["avg_jct_s"]),
                makespan,
                nodes,
                wall,
                end_section=config == list(CONFIGS)[-1],
            )
    console = Console(width=130)
    console.print(table)
    base = means["fixed 16"]
    for config in list(CONFIGS)[1:]:
        saved = 1 - means[config]["node_hours"] / base["node_hours"]
        longer = means[config]["avg_jct_s"] / base["avg_jct_s"] - 1
        verdict = "meets" if saved > 0 and longer <= JCT_SLACK else "misses"
        cost = f"{100 * abs(saved):.1f}% {'fewer' if saved > 0 else 'more'} node-hours"
        console.print(
            f"{config}: {cost} at {100 * longer:+.1f}% avg JCT — {verdict} the goal "
            f"(fewer node-hours at <= {100 * JCT_SLACK:.0f}% longer JCT)"
        )
    console.print(
        f"wall {time.perf_counter() - started:.0f} s on {platform.node()} ({platform.processor() or platform.machine()}"
        f", {os.cpu_count()} CPUs, Python {platform.python_version()}), {args.processes} simulation(s) at once"
    )


if __name__ == "__main__":
    main()
