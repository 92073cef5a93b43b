"""Sia's GPT scenario (§5.3, Figure 6): a hybrid-parallel GPT job scaled down under congestion and back up after.

The job is the Sia artifact's `gpt_pmp` (a 2.8B GPT, pipeline replicas of 2 A100s or 8 RTX 2080Tis, data parallel
across replicas, 48 micro-batches of one example per replica: `pollux.sim.pipeline`), alone on `sia-heterogeneous`
from time 0; from hour 1 the first N jobs of a Helios workload (default `saturn/workload-1`, N = 40) arrive within a
quarter of an hour (`pollux.sim.hybrid.gpt_scenario`). `pollux` runs it all; the table gives, at every change, what
the GPT job held (GPUs, replicas, GPUs per replica and so the type) beside the jobs in the system, and the plot the
same over time. The paper: Sia scales the job down about hour 1 and back up about hour 4.

The last line reads `gpt scenario: R0 replicas before hour 1, down to R1 (G1 GPUs of T1) at hour h1, back to R2
(G2 GPUs of T2) at hour h2; replicas of 2 GPUs on dgx-ext, 8 GPUs on rtx`.

Run: .venv/bin/python -m benchmarks.hybrid_gpt [--workload saturn/workload-1] [--background 40] [--plot PATH]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pollux.cluster_spec import load_cluster
from pollux.sim.hybrid import BURST_AT_S, GPT_APPLICATION, GPT_NAME, GptPoint, gpt_scenario, gpt_track
from pollux.sim.run import SimConfig, SimResult, simulate, simulated_policy
from pollux.sim.typed import load_typed_models
from pollux.sim.workload import read_workload

HOUR = 3600.0
CLUSTER = "sia-heterogeneous"


def run(workload: str, background: int, interval_s: int) -> tuple[SimResult, list[GptPoint], dict[int, str]]:
    """The scenario under `pollux`: its result, the GPT job's points, and the GPU type of each replica size."""
    models = load_typed_models("sia-sosp23", pipelines=True)
    rows = gpt_scenario(read_workload(workload, applications=models).jobs[:background])
    config = SimConfig(cluster=load_cluster(CLUSTER), interval_s=interval_s)
    result = simulate(rows, simulated_policy("pollux", config, models), models, config)
    gpt = models[GPT_APPLICATION]
    replica_batch = gpt.on(gpt.gpu_types[0]).min_local_bsz
    types = {gpt.gpus_per_replica(t): t for t in gpt.gpu_types}
    return result, gpt_track(result.job_timelines[GPT_NAME], replica_batch), types


def summary_line(points: list[GptPoint], types: dict[int, str]) -> str:
    """The last line: the GPT job's replicas before the burst, at their fewest while it lasts, and when it has as
    many again (replicas, not GPUs: 8 RTX GPUs are one replica, its batch and its speed)."""
    before = max((p.replicas for p in points if p.time_s < BURST_AT_S), default=0)
    after = [p for p in points if p.time_s >= BURST_AT_S]
    low = min(after, key=lambda p: (p.replicas, p.time_s), default=None)
    back = next((p for p in after if low is not None and p.time_s > low.time_s and p.replicas >= before), None)
    sizes = sorted({p.gpus_per_replica for p in points if p.replicas})
    replicas = ", ".join(f"{k} GPUs on {types.get(k, '?')}" for k in sizes)

    def held(p: GptPoint) -> str:
        return f"{p.replicas} ({p.gpus} GPUs of {types.get(p.gpus_per_replica, '-')}) at hour {p.time_s / HOUR:.1f}"

    low_text = "none after hour 1" if low is None else f"down to {held(low)}"
    back_text = "not back up" if back is None else f"back to {held(back)}"
    return f"gpt scenario: {before} replicas before hour 1, {low_text}, {back_text}; replicas of {replicas}"


def plot(result: SimResult, points: list[GptPoint], path: Path) -> None:
    from pollux.sim.report import _pyplot

    plt = _pyplot()
    figure, gpus = plt.subplots(figsize=(7.0, 3.6))
    times = [p.time_s / HOUR for p in points]
    gpus.step(times, [p.gpus for p in points], where="post", label="GPT job's GPUs", color="tab:blue")
    gpus.set_xlabel("hours")
    gpus.set_ylabel("GPUs")
    jobs = gpus.twinx()
    jobs.plot(
        [t.time_s / HOUR for t in result.timeline],
        [t.jobs_running + t.jobs_queued for t in result.timeline],
        color="tab:gray",
        linewidth=0.8,
        label="jobs in the system",
    )
    jobs.set_ylabel("jobs")
    gpus.set_title(f"Sia's GPT scenario under pollux on {CLUSTER}")
    figure.legend(loc="upper right", fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="saturn/workload-1", help="where the background jobs come from")
    parser.add_argument("--background", type=int, default=40, help="its first N jobs")
    parser.add_argument("--interval", type=int, default=60, help="seconds per scheduling round")
    parser.add_argument("--plot", default="results/hybrid-gpt.png")
    args = parser.parse_args()
    console = Console(width=120)
    started = time.perf_counter()
    result, points, types = run(args.workload, args.background, args.interval)
    jobs_at = {t.time_s: t.jobs_running + t.jobs_queued for t in result.timeline}
    table = Table(title=f"the GPT job on {CLUSTER}, {args.background} jobs of {args.workload} from hour 1")
    for column in ("hour", "GPUs", "replicas", "GPUs/replica", "type", "jobs in the system"):
        table.add_column(column, justify="right")
    for p in points:
        size = p.gpus_per_replica
        table.add_row(
            f"{p.time_s / HOUR:.2f}",
            str(p.gpus),
            str(p.replicas),
            str(size or "-"),
            types.get(size, "-"),
            str(jobs_at.get(p.time_s, "")),
        )
    console.print(table)
    gpt = next(job for job in result.jobs if job.name == GPT_NAME)
    jct = "unfinished" if gpt.jct_s is None else f"{gpt.jct_s / HOUR:.2f} h"
    console.print(f"GPT job: JCT {jct}, {gpt.restarts} restarts; wall time {time.perf_counter() - started:.1f} s")
    plot(result, points, Path(args.plot))
    console.print(f"plot: {args.plot}")
    console.print(summary_line(points, types))


if __name__ == "__main__":
    main()
