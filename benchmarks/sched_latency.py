"""Seconds per Pollux scheduling round as jobs and GPUs grow (goal: 1,000 jobs on 1,024 GPUs under 1 s).

Each round comes from `benchmarks.synthetic_jobs`: jobs drawn from the six measured models at varied progress, most
holding what a round a minute earlier gave them, on 4-GPU nodes. `optimize` is timed whole (best and median of
repeats); `value_table`, the per-job values it builds first, is timed apart to show where the time goes.

`--typed`: the same on clusters of three GPU types instead, Sia's Figure 9 range (SOSP'23: 64 to 2,048 GPUs × 3
types). The 64-GPU cluster is the `sia-heterogeneous` preset (6 × 4 aws + 3 × 8 rtx + 2 × 8 dgx-ext); larger ones
have k times its nodes, each type's nodes of the same shape. Jobs grow as in Sia's figure, from 160 on 64 GPUs to
1,000 on 2,048 (geometrically between, about 160 · (GPUs / 64)^0.53); rounds come from
`benchmarks.synthetic_jobs.synthetic_typed_round` (Sia's six models). The value-table column times the per-type
tables (`typed_value_tables`); Sia's published median policy time is printed beside the sizes it reports.

Run: .venv/bin/python -m benchmarks.sched_latency [--typed] [--repeats 3] [--seed 0] [--size 1000x1024 ...]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks.synthetic_jobs import applications, synthetic_round, synthetic_typed_round, typed_applications
from pollux.cluster import Cluster, validate_allocations
from pollux.cluster_spec import load_cluster
from pollux.policies.pollux import PolluxPolicy
from pollux.policies.registry import make_policy
from pollux.policies.typed_search import type_slices, typed_value_tables

SIZES = ((20, 64), (100, 256), (1000, 1024), (5000, 4096))
GPUS_PER_NODE = 4
NOW = 36000.0

TYPED_PRESET = "sia-heterogeneous"  # 64 GPUs of 3 types: Sia's smallest size in Figure 9
TYPED_SIZES = ((160, 64), (330, 256), (690, 1024), (1000, 2048))
# Sia's median policy time (SOSP'23, Figure 9) at the sizes the paper states it for.
SIA_PUBLISHED = {64: "96 ms", 2048: "≈ 1 s"}


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


def typed_cluster(gpus: int) -> Cluster:
    """`TYPED_PRESET` with `gpus // 64` times its nodes of every group."""
    base = load_cluster(TYPED_PRESET)
    scale, rest = divmod(gpus, base.num_gpus)
    if rest or scale < 1:
        raise SystemExit(f"--typed sizes need a multiple of {base.num_gpus} GPUs, got {gpus}")
    return base.scaled(scale)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", action="append", type=parse_size, help="JOBSxGPUS, e.g. 1000x1024 (repeatable)")
    parser.add_argument("--typed", action="store_true", help="clusters of 3 GPU types (Sia's Figure 9 range)")
    args = parser.parse_args()
    console = Console(width=120)
    if args.typed:
        typed_main(args, console)
        return
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
            assert isinstance(policy, PolluxPolicy)
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


def typed_main(args: argparse.Namespace, console: Console) -> None:
    """The `--typed` table (module docstring)."""
    table = Table(
        title=f"Pollux round latency, 3 GPU types ({load_cluster(TYPED_PRESET).describe()} × k), "
        f"best / median of {args.repeats}"
    )
    for name in (
        "jobs",
        "GPUs",
        "nodes",
        "value tables s",
        "optimize s (best)",
        "optimize s (median)",
        "Sia (paper)",
        "jobs placed",
        "GPUs used",
    ):
        table.add_column(name, justify="right")
    for jobs_n, gpus_n in args.size or TYPED_SIZES:
        cluster = typed_cluster(gpus_n)
        typed_applications(cluster.gpu_types)  # load and fit the models once per type, outside the timings
        with console.status(f"{jobs_n} jobs on {gpus_n} GPUs of {len(cluster.gpu_types)} types"):
            jobs = synthetic_typed_round(jobs_n, cluster, np.random.default_rng(args.seed), NOW)
            policy = make_policy("pollux")
            assert isinstance(policy, PolluxPolicy)
            result = policy.optimize(jobs, cluster, NOW)
            validate_allocations(cluster, result.allocations, avoid_sharing=True)
            pieces = type_slices(cluster)
            table_s = timed(lambda: typed_value_tables(policy, jobs, cluster, pieces, NOW), args.repeats)  # noqa: B023
            optimize_s = timed(lambda: policy.optimize(jobs, cluster, NOW), args.repeats)  # noqa: B023
        table.add_row(
            f"{jobs_n:,}",
            f"{gpus_n:,}",
            f"{cluster.num_nodes}",
            f"{min(table_s):.4f}",
            f"{min(optimize_s):.4f}",
            f"{statistics.median(optimize_s):.4f}",
            SIA_PUBLISHED.get(gpus_n, "–"),
            f"{len(result.allocations):,}",
            f"{sum(sum(a) for a in result.allocations.values()):,}",
        )
    console.print(table)


if __name__ == "__main__":
    main()
