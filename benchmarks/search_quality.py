"""Fitness reached and seconds taken: our Pollux search against the artifact's genetic algorithm, same rounds.

Rounds: 20+ recorded from the simulator running our Pollux on workload-1 (spread over the run, at least 10 active
jobs each), and one synthetic round of 1,000 jobs on 1,024 GPUs (`benchmarks.synthetic_jobs`). On each, both
searches maximize the same fitness (`PolluxPolicy.evaluate` on `PolluxPolicy.value_table`). The GA runs as the
artifact's (`benchmarks.ga_yardstick`): population 100, 100 generations, warm-started from its population of the
previous round in the table (the artifact's previous round was a minute earlier; here it is further back); on the
synthetic round it is also capped in time, and the table says how many generations it reached.

Run: .venv/bin/python -m benchmarks.search_quality [--rounds 24] [--ga-time-limit 300] [--seed 0]
(needs the bench extra: pip install -e '.[bench]')
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks.ga_yardstick import ArtifactGA
from benchmarks.synthetic_jobs import applications, synthetic_round
from pollux.cluster import Cluster, validate_allocations
from pollux.policies.base import JobView, PolicyResult
from pollux.policies.pollux import PolluxPolicy
from pollux.policies.registry import make_policy
from pollux.sim.measured import load_measured_models
from pollux.sim.run import SimConfig, simulate
from pollux.sim.workload import read_workload

MIN_ACTIVE_JOBS = 10


@dataclass(frozen=True)
class Round:
    label: str
    jobs: tuple[JobView, ...]
    cluster: Cluster
    now: float


class RecordingPollux(PolluxPolicy):
    """Our Pollux, remembering what every round showed it."""

    def __init__(self) -> None:
        super().__init__()
        self.rounds: list[Round] = []

    def optimize(self, jobs: Sequence[JobView], cluster: Cluster, now: float) -> PolicyResult:
        self.rounds.append(Round(f"workload-1 t={now / 3600:.2f} h", tuple(jobs), cluster, now))
        return super().optimize(jobs, cluster, now)


def recorded_rounds(count: int) -> list[Round]:
    """`count` rounds with at least `MIN_ACTIVE_JOBS` jobs, evenly spread over a workload-1 run."""
    models = load_measured_models()
    policy = RecordingPollux()
    simulate(read_workload("workload-1", applications=models).jobs, policy, models, SimConfig())
    busy = [r for r in policy.rounds if len(r.jobs) >= MIN_ACTIVE_JOBS]
    picks = np.unique(np.linspace(0, len(busy) - 1, count).round().astype(int))
    return [busy[i] for i in picks]


def fitness_of(policy: PolluxPolicy, result: PolicyResult, rnd: Round) -> float:
    """`evaluate` of a result, so both searches are scored by the same code."""
    values = policy.value_table(rnd.jobs, rnd.cluster, rnd.now)
    states = np.array([[result.allocations.get(job.name, rnd.cluster.empty()) for job in rnd.jobs]])
    return float(policy.evaluate(values, states)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=24, help="recorded workload-1 rounds (default 24)")
    parser.add_argument("--ga-time-limit", type=float, default=300.0, help="GA seconds on the synthetic round")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    console = Console(width=120)

    with console.status("recording rounds from a workload-1 simulation"):
        rounds = recorded_rounds(args.rounds)
        applications()
        big = Cluster(num_nodes=256, gpus_per_node=4)
        rounds.append(
            Round("synthetic", tuple(synthetic_round(1000, big, np.random.default_rng(args.seed))), big, 36000)
        )

    policy = make_policy("pollux")
    ga = ArtifactGA(policy)
    ga.search(rounds[0].jobs, rounds[0].cluster, rounds[0].now, np.random.default_rng(args.seed))  # warm up pymoo
    ga = ArtifactGA(policy)
    table = Table(title="Search quality: fitness (higher is better) and seconds per round, ours vs the artifact's GA")
    for name in (
        "round",
        "jobs",
        "GPUs",
        "ours fitness",
        "GA fitness",
        "ours/GA",
        "ours s",
        "GA s",
        "GA gens",
        "speed",
    ):
        table.add_column(name, justify="left" if name == "round" else "right")
    worst_ratio, slowest, below = np.inf, 0.0, 0
    for i, rnd in enumerate(rounds):
        with console.status(f"round {i + 1}/{len(rounds)}: {rnd.label}, {len(rnd.jobs)} jobs"):
            start = time.perf_counter()
            result = policy.optimize(rnd.jobs, rnd.cluster, rnd.now)
            ours_s = time.perf_counter() - start
            synthetic = rnd.label == "synthetic"
            found = ga.search(rnd.jobs, rnd.cluster, rnd.now, rng, args.ga_time_limit if synthetic else None)
        validate_allocations(rnd.cluster, result.allocations, avoid_sharing=True)
        validate_allocations(rnd.cluster, found.allocations, avoid_sharing=True)
        ours = fitness_of(policy, result, rnd)
        theirs = fitness_of(policy, PolicyResult(found.allocations), rnd)
        worst_ratio = min(worst_ratio, ours / theirs)
        below += ours < theirs
        slowest = max(slowest, ours_s / found.seconds)
        gens = f"{found.generations}" + (" (time cap)" if found.generations < ga.generations else "")
        table.add_row(
            rnd.label,
            str(len(rnd.jobs)),
            str(rnd.cluster.num_gpus),
            f"{ours:.5f}",
            f"{theirs:.5f}",
            f"{ours / theirs:.4f}",
            f"{ours_s:.4f}",
            f"{found.seconds:.2f}",
            gens,
            f"{found.seconds / ours_s:,.0f}×",
        )
    console.print(table)
    console.print(
        f"ours below the GA on {below} of {len(rounds)} rounds; worst ours/GA fitness ratio {worst_ratio:.6f} "
        f"(≥ 1: ours at least as fit on every round); ours took at most {slowest:.4f} of the GA's time"
    )


if __name__ == "__main__":
    main()
