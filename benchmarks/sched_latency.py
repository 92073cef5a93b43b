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

`--sia-scale`: Sia's Figure 9 on its own workloads instead of synthetic rounds. `scale_Kx/workload-1` (the Sia
artifact's Helios workload with every job issued K times, found like any data: `--data-dir`, `$POLLUX_SIA_DATA_DIR`,
`../shared/data`, the cache) is simulated whole under `pollux` on `sia-heterogeneous:Kx` (K times its nodes, 64·K
GPUs), K = 2, 4, 8, 16, 32 (`--scales`), and every round's `optimize` is timed as it happens: the median, p95 and
largest seconds per round (wall clock, and the process's CPU seconds, which other work on the machine does not
inflate), beside Sia's (96 ms median, 426 ms p95 at 64 GPUs; about 1 s at 2,048), and the simulation's wall time.
A bar per size shows the jobs finished and the rounds so far. The last line reads `sia-scale 32x (2048 GPUs):
median X s, p95 Y s per round` (the largest size run).

Run: .venv/bin/python -m benchmarks.sched_latency [--typed | --sia-scale [--scales 2 4 8 ...] [--data-dir DIR]]
     [--repeats 3] [--seed 0] [--size 1000x1024 ...]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from benchmarks.synthetic_jobs import applications, synthetic_round, synthetic_typed_round, typed_applications
from pollux.cluster import Cluster, validate_allocations
from pollux.cluster_spec import load_cluster
from pollux.policies.pollux import PolluxPolicy
from pollux.policies.registry import make_policy
from pollux.policies.typed_search import type_slices, typed_value_tables
from pollux.sim.run import SimConfig, simulate, simulated_policy
from pollux.sim.typed import load_typed_models
from pollux.sim.workload import read_workload

SIZES = ((20, 64), (100, 256), (1000, 1024), (5000, 4096))
GPUS_PER_NODE = 4
NOW = 36000.0

TYPED_PRESET = "sia-heterogeneous"  # 64 GPUs of 3 types: Sia's smallest size in Figure 9
TYPED_SIZES = ((160, 64), (330, 256), (690, 1024), (1000, 2048))
# Sia's median policy time (SOSP'23, Figure 9) at the sizes the paper states it for.
SIA_PUBLISHED = {64: "96 ms", 2048: "≈ 1 s"}

SIA_SCALES = (2, 4, 8, 16, 32)  # the Sia artifact's scale_Kx workloads, for sia-heterogeneous:Kx
# Sia's policy run time per round (SOSP'23, Figure 9): median and p95 at 64 GPUs, the median at 2,048.
SIA_SCALE_PUBLISHED = "Sia (SOSP'23, Figure 9): median 0.096 s, p95 0.426 s per round at 64 GPUs; about 1 s at 2,048"


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
    parser.add_argument("--sia-scale", action="store_true", help="Sia's scale_Kx workloads simulated whole (Figure 9)")
    parser.add_argument("--scales", type=int, nargs="+", default=SIA_SCALES, choices=SIA_SCALES, metavar="K")
    parser.add_argument("--workload", type=int, default=1, help="which scale_Kx/workload-N (1-10)")
    parser.add_argument("--data-dir", type=Path, default=None, help="the sia-sosp23 data folder")
    args = parser.parse_args()
    console = Console(width=120)
    if args.typed:
        typed_main(args, console)
        return
    if args.sia_scale:
        sia_scale_main(args, console)
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


@dataclass(frozen=True)
class ScaleRun:
    """One scale_Kx workload simulated whole: every round's `optimize` seconds (wall and CPU), and the run's."""

    factor: int
    gpus: int
    jobs: int
    round_s: tuple[float, ...]
    round_cpu_s: tuple[float, ...]
    wall_s: float
    avg_jct_s: float

    def line(self) -> str:
        """The one-line result (the benchmark's last line, for the largest size)."""
        median, p95 = statistics.median(self.round_s), float(np.percentile(self.round_s, 95))
        return f"sia-scale {self.factor}x ({self.gpus} GPUs): median {median:.3f} s, p95 {p95:.3f} s per round"


def run_scale(factor: int, workload: int, data_dir: Path | None, progress: Progress) -> ScaleRun:
    """Simulate `scale_{factor}x/workload-{workload}` under `pollux` on `sia-heterogeneous:{factor}x`, timing every
    round's `optimize` (as `benchmarks.hetero` does), with a bar of jobs finished and rounds so far."""
    models = load_typed_models("sia-sosp23", data_dir)
    rows = read_workload(f"scale_{factor}x/workload-{workload}", data_dir, applications=models).jobs
    config = SimConfig(cluster=load_cluster(f"{TYPED_PRESET}:{factor}x"))
    policy = simulated_policy("pollux", config, models)
    optimize = policy.optimize
    walls: list[float] = []
    cpus: list[float] = []

    def timed(*args, **kwargs):
        wall, cpu = time.perf_counter(), time.process_time()
        result = optimize(*args, **kwargs)
        cpus.append(time.process_time() - cpu)
        walls.append(time.perf_counter() - wall)
        return result

    policy.optimize = timed  # type: ignore[method-assign]
    task = progress.add_task(f"scale_{factor}x ({config.cluster.num_gpus} GPUs)", total=len(rows), rounds="")

    def on_round(now: float, finished: int, total: int) -> None:
        recent = walls[-20:]
        rounds = f"{len(walls)} rounds, last 20: median {statistics.median(recent):.2f} s" if recent else ""
        progress.update(task, completed=finished, rounds=rounds)

    result = simulate(rows, policy, models, config, on_round=on_round)
    return ScaleRun(
        factor,
        config.cluster.num_gpus,
        len(rows),
        tuple(walls),
        tuple(cpus),
        result.wall_s,
        result.summary["avg_jct_s"],
    )


def sia_scale_main(args: argparse.Namespace, console: Console) -> None:
    """The `--sia-scale` table (module docstring)."""
    runs = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("jobs done"))
    with Progress(*columns, TextColumn("{task.fields[rounds]}"), TimeElapsedColumn(), console=console) as progress:
        for factor in sorted(set(args.scales)):
            runs.append(run_scale(factor, args.workload, args.data_dir, progress))
    table = Table(title=f"Pollux round latency on Sia's scale_Kx/workload-{args.workload}, sia-heterogeneous:Kx")
    for name in ("K", "GPUs", "jobs", "rounds", "median s", "p95 s", "max s", "CPU median s", "CPU p95 s"):
        table.add_column(name, justify="right")
    table.add_column("simulation wall s", justify="right")
    table.add_column("avg JCT h", justify="right")
    for run in runs:
        table.add_row(
            f"{run.factor}x",
            f"{run.gpus:,}",
            f"{run.jobs:,}",
            f"{len(run.round_s):,}",
            f"{statistics.median(run.round_s):.3f}",
            f"{np.percentile(run.round_s, 95):.3f}",
            f"{max(run.round_s):.3f}",
            f"{statistics.median(run.round_cpu_s):.3f}",
            f"{np.percentile(run.round_cpu_s, 95):.3f}",
            f"{run.wall_s:,.0f}",
            f"{run.avg_jct_s / 3600:.2f}",
        )
    console.print(table)
    console.print(SIA_SCALE_PUBLISHED)
    for run in runs:
        print(run.line())


if __name__ == "__main__":
    main()
