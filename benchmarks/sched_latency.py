"""Seconds per Pollux scheduling round as jobs and GPUs grow (goal: 1,000 jobs on 1,024 GPUs under 1 s).

Each round comes from `benchmarks.synthetic_jobs`: jobs drawn from the six measured models at varied progress, most
holding what a round a minute earlier gave them, on 4-GPU nodes. `optimize` is timed whole (best and median of
repeats); `value_table`, the per-job values it builds first, is timed apart to show where the time goes.

Run: .venv/bin/python -m benchmarks.sched_latency [--repeats 3] [--seed 0] [--size 1000x1024 ...]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks.synthetic_jobs import applications, synthetic_round
from pollux.cluster import Cluster, validate_allocations
from pollux.policies.registry import make_policy

SIZES = ((20, 64), (100, 256), (1000, 1024), (5000, 4096))
GPUS_PER_NODE = 4
NOW = 36000.0


def timed(fn: Callable[[], object], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def parse_size(text: str) -> tuple[int, int]:
    jobs, gpus = text.lower().split("x")
    return int(jobs), int(gpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", action="append", type=parse_size, help="JOBSxGPUS, e.g. 1000x1024 (repeatable)")
    args = parser.parse_args()
    console = Console(width=120)
    applications()  # load and fit the six models once, outside the timings

    table = Table(title=f"Pollux round latency, {GPUS_PER_NODE}-GPU nodes, best / median of {args.repeats}")
    for name in (
        "jobs",
        "GPUs",
        "value table s",
        "optimize s (best)",
        "optimize s (median)",
        "jobs placed",
        "GPUs used",
    ):
        table.add_column(name, justify="right")
    for jobs_n, gpus_n in args.size or SIZES:
        cluster = Cluster(num_nodes=gpus_n // GPUS_PER_NODE, gpus_per_node=GPUS_PER_NODE)
        with console.status(f"{jobs_n} jobs on {gpus_n} GPUs"):
            jobs = synthetic_round(jobs_n, cluster, np.random.default_rng(args.seed), NOW)
            policy = make_policy("pollux")
            result = policy.optimize(jobs, cluster, NOW)
            validate_allocations(cluster, result.allocations, avoid_sharing=True)
            table_s = timed(lambda: policy.value_table(jobs, cluster, NOW), args.repeats)  # noqa: B023
            optimize_s = timed(lambda: policy.optimize(jobs, cluster, NOW), args.repeats)  # noqa: B023
        table.add_row(
            f"{jobs_n:,}",
            f"{gpus_n:,}",
            f"{min(table_s):.4f}",
            f"{min(optimize_s):.4f}",
            f"{statistics.median(optimize_s):.4f}",
            f"{len(result.allocations):,}",
            f"{sum(sum(a) for a in result.allocations.values()):,}",
        )
    console.print(table)


if __name__ == "__main__":
    main()
