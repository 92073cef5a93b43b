"""Our simulator against Sia's, on Sia's own schedules: replay the per-round allocations of a Sia simulator run.

Sia's simulator (repository siasosp23/artifacts, `sia-simulator/multi_simulator.py --output DIR`) writes one log per
workload, one JSON line per round with every job's GPU type and GPUs by node. Replaying those allocations as a policy
here takes the policy out of the comparison: what is left is the two simulators' job models (step times, batch
choice, restores, progress). Jobs that need a little longer here than there would find Sia's schedule over; they keep
their last allocation on spare nodes of the same type and shape (the replay cluster has every group twice), so one
late job does not queue behind the next round's others.

Run: .venv/bin/python -m benchmarks.sia_replay --logs DIR [--trace philly|saturn]
     (DIR: Sia's output for that trace, `workload-N.log` files; docs/design.md, "Sia's artifact, rerun")
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
from rich.console import Console
from rich.table import Table

from pollux.cluster import Cluster, NodeGroup
from pollux.cluster_spec import load_cluster
from pollux.errors import SpecError
from pollux.policies.base import JobView, Policy, PolicyResult
from pollux.sim.run import SimConfig, simulate
from pollux.sim.typed import load_typed_models
from pollux.sim.workload import read_workload

HOUR = 3600.0


@dataclass(frozen=True)
class SiaRun:
    """What one Sia log says: per round, each active job's (GPU type, node of each GPU); per job, its JCT and when
    it finished."""

    rounds: Mapping[int, Mapping[str, tuple[str, tuple[int, ...]]]]
    jct_s: Mapping[str, float]
    finish_s: Mapping[str, float]

    @classmethod
    def read(cls, path: Path) -> SiaRun:
        rounds: dict[int, dict[str, tuple[str, tuple[int, ...]]]] = {}
        last: list[dict] = []
        with open(path) as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    jobs = record["submitted_jobs"]
                    held = {}
                    for job in jobs:
                        allocation = job["allocation"]
                        if job["completion_time"] is None and allocation and allocation[1]:
                            held[job["name"]] = (str(allocation[0]), tuple(int(n) for n in allocation[1]))
                    rounds[int(record["timestamp"])] = held
                except (KeyError, TypeError, IndexError, ValueError) as error:
                    raise SpecError(
                        f"{path}:{number}: not a round of Sia's simulator log ({error!r}); expected the JSON lines "
                        "that multi_simulator.py --output writes"
                    ) from error
                last = jobs
        unfinished = [job["name"] for job in last if job["completion_time"] is None]
        if not last or unfinished:
            raise SpecError(f"{path}: the log ends with jobs unfinished ({unfinished[:3]}); replay a complete run")
        jct = {job["name"]: float(job["completion_time"] - job["submission_time"]) for job in last}
        return cls(rounds, jct, {job["name"]: float(job["completion_time"]) for job in last})


def doubled(cluster: Cluster) -> Cluster:
    """The replay's cluster: every node group twice as many nodes, the second half spare."""
    return Cluster.of_groups([NodeGroup(g.gpu_type, 2 * g.num_nodes, g.gpus_per_node) for g in cluster.groups])


class SiaReplay(Policy):
    """Gives each job, every round, the GPUs Sia's run gave it then (node indices within its type's group)."""

    name: ClassVar[str] = "sia-replay"
    batch_owner = "job"

    def __init__(self, run: SiaRun, cluster: Cluster) -> None:
        self.run = run
        self.first_node: dict[str, int] = {}
        self.spare: dict[str, int] = {}
        node = 0
        for group in cluster.groups:  # the doubled cluster: Sia's nodes first, then as many spare
            self.first_node[group.gpu_type] = node
            self.spare[group.gpu_type] = group.num_nodes // 2
            node += group.num_nodes
        self.last: dict[str, tuple[int, ...]] = {}  # on the spare nodes
        self.overrun: set[str] = set()

    def optimize(self, jobs: Sequence[JobView], cluster: Cluster, now: float) -> PolicyResult:
        held = self.run.rounds.get(round(now), {})
        placed: dict[str, tuple[int, ...]] = {}
        late = []
        for job in jobs:
            if job.name not in self.run.jct_s:
                raise SpecError(f"job {job.name!r} is not in Sia's log: replay the log of the same workload")
            if job.name not in held:
                if now >= self.run.finish_s[job.name]:  # Sia's run had finished it by now
                    late.append(job)
                continue
            gpu_type, nodes = held[job.name]
            here, spare = [0] * cluster.num_nodes, [0] * cluster.num_nodes
            for node in nodes:
                here[self.first_node[gpu_type] + node] += 1
                spare[self.first_node[gpu_type] + self.spare[gpu_type] + node] += 1
            placed[job.name] = tuple(here)
            self.last[job.name] = tuple(spare)
        used = np.sum([placed[name] for name in placed], axis=0) if placed else np.zeros(cluster.num_nodes, int)
        for job in late:
            spare = self.last.get(job.name)
            if spare is not None and np.all(used + spare <= cluster.node_gpus):
                placed[job.name] = spare
                used = used + spare
                self.overrun.add(job.name)
        return PolicyResult(placed)


@dataclass(frozen=True)
class Comparison:
    """One workload: our simulator's JCTs on Sia's schedule beside Sia's."""

    workload: str | Path
    ours_s: Mapping[str, float]
    sia_s: Mapping[str, float]
    overrun: frozenset[str] = field(default_factory=frozenset)

    @property
    def relative(self) -> np.ndarray:
        return np.array([self.ours_s[n] / self.sia_s[n] - 1 for n in self.sia_s])

    @property
    def avg_ratio(self) -> float:
        return float(np.mean(list(self.ours_s.values())) / np.mean(list(self.sia_s.values())))


def replay(workload: str | Path, log: Path, cluster_name: str = "sia-heterogeneous") -> Comparison:
    """Run `workload` (a name such as "philly/workload-1", or a CSV) on Sia's schedule from `log`."""
    run = SiaRun.read(log)
    models = load_typed_models("sia-sosp23")
    rows = read_workload(workload, applications=models).jobs
    cluster = doubled(load_cluster(cluster_name))
    policy = SiaReplay(run, cluster)
    result = simulate(rows, policy, models, SimConfig(cluster=cluster))
    ours = {job.name: float(job.jct_s) for job in result.jobs if job.jct_s is not None}
    missing = sorted(set(run.jct_s) - set(ours))
    if missing:
        raise SpecError(f"{log}: jobs {missing[:3]} are in Sia's log but not in {workload}")
    return Comparison(workload, ours, run.jct_s, frozenset(policy.overrun))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=Path, required=True, help="Sia's output folder of one trace")
    parser.add_argument("--trace", default="philly", choices=("philly", "saturn"))
    args = parser.parse_args()
    logs = sorted(args.logs.glob("workload-*.log"), key=lambda p: int(p.stem.split("-")[1]))
    if not logs:
        raise SystemExit(f"{args.logs}: no workload-N.log files (Sia's multi_simulator.py --output writes them)")
    table = Table(title=f"{args.trace}: our simulator on Sia's schedules, against Sia's simulator")
    for column in ("workload", "avg JCT h ours / Sia", "avg", "median job", "p5 / p95 job", "jobs within 1%", "late"):
        table.add_column(column, justify="left" if column == "workload" else "right")
    console = Console(width=150)
    for log in logs:
        c = replay(f"{args.trace}/{log.stem}", log)
        r = c.relative
        ours_h = np.mean(list(c.ours_s.values())) / HOUR
        sia_h = np.mean(list(c.sia_s.values())) / HOUR
        table.add_row(
            log.stem,
            f"{ours_h:.3f} / {sia_h:.3f}",
            f"{c.avg_ratio - 1:+.2%}",
            f"{np.median(r):+.2%}",
            f"{np.percentile(r, 5):+.1%} / {np.percentile(r, 95):+.1%}",
            f"{np.mean(np.abs(r) <= 0.01):.0%}",
            str(len(c.overrun)),
        )
    console.print(table)


if __name__ == "__main__":
    main()
