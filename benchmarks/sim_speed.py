"""Wall time of the baselines on workload-1, one after the other in this process (goal: all three < 10 s).

Run: .venv/bin/python -m benchmarks.sim_speed [--workload workload-1] [--policy NAME ...]
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from pollux.sim.measured import load_measured_models
from pollux.sim.run import SimConfig, simulate, simulated_policy
from pollux.sim.workload import read_workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="workload-1")
    parser.add_argument("--policy", action="append", default=None)
    args = parser.parse_args()
    policies = args.policy or ["fifo", "tiresias", "optimus"]

    start = time.perf_counter()
    models = load_measured_models()
    workload = read_workload(args.workload, applications=models)
    load_s = time.perf_counter() - start
    table = Table(title=f"Simulation speed on {args.workload} ({len(workload)} jobs, 64 GPUs, 60 s rounds)")
    for name in ("policy", "avg JCT h", "rounds", "wall s"):
        table.add_column(name, justify="left" if name == "policy" else "right")
    total = load_s
    for name in policies:
        start = time.perf_counter()
        result = simulate(workload.jobs, simulated_policy(name, SimConfig(), models), models, SimConfig())
        wall = time.perf_counter() - start
        total += wall
        table.add_row(name, f"{result.summary['avg_jct_s'] / 3600:.3f}", str(len(result.timeline)), f"{wall:.2f}")
    table.add_row("(loading profiles + workload)", "", "", f"{load_s:.2f}")
    table.add_row("total", "", "", f"{total:.2f}")
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
