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

from benchmarks.hetero import TRACES
from pollux.cluster import Cluster
from pollux.cluster_spec import load_cluster
from pollux.errors import SpecError
from pollux.policies.base import JobView, Policy, PolicyResult
from pollux.sim.run import SimConfig, simulate
from pollux.sim.typed import load_typed_models
from pollux.sim.workload import WorkloadJob, read_workload

HOUR = 3600.0


@dataclass(frozen=True)
class SiaRun:
    """What one Sia log says: the nodes of each GPU type, per round each active job's (GPU type, node of each GPU),
    and per job when it came and went and the GPU-seconds it held (restores included)."""

    nodes_by_type: Mapping[str, int]
    rounds: Mapping[int, Mapping[str, tuple[str, tuple[int, ...]]]]
    submit_s: Mapping[str, float]
    finish_s: Mapping[str, float]
    gpu_s: Mapping[str, float]

    @property
    def jct_s(self) -> dict[str, float]:
        return {name: self.finish_s[name] - self.submit_s[name] for name in self.finish_s}

    @property
    def makespan_s(self) -> float:
        return max(self.finish_s.values()) - min(self.submit_s.values())

    @classmethod
    def read(cls, path: Path) -> SiaRun:
        rounds: dict[int, dict[str, tuple[str, tuple[int, ...]]]] = {}
        nodes_by_type: dict[str, int] = {}
        last: list[dict] = []
        with open(path) as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    jobs = record["submitted_jobs"]
                    nodes_by_type = {str(t): int(n) for t, n in record["num_nodes"].items()}
                    held = {}
                    for job in jobs:
                        allocation = job["allocation"]
                        if job["completion_time"] is None and allocation and allocation[1]:
                            held[job["name"]] = (str(allocation[0]), tuple(int(n) for n in allocation[1]))
                    rounds[int(record["timestamp"])] = held
                except (KeyError, TypeError, IndexError, ValueError, AttributeError) as error:
                    raise SpecError(
                        f"{path}:{number}: not a round of Sia's simulator log ({error!r}); expected the JSON lines "
                        "that multi_simulator.py --output writes"
                    ) from error
                last = jobs
        if not last:
            raise SpecError(f"{path}: no rounds; replay the log of a whole run (multi_simulator.py --output)")
        unfinished = [job["name"] for job in last if job["completion_time"] is None]
        if unfinished:
            raise SpecError(f"{path}: the log ends with jobs unfinished ({unfinished[:3]}); replay a complete run")
        finish = {job["name"]: float(job["completion_time"]) for job in last}
        gpu_s = dict.fromkeys(finish, 0.0)
        steps = sorted(rounds)
        for t, after in zip(steps, [*steps[1:], None], strict=True):
            for name, (_, nodes) in rounds[t].items():  # held from t to the next round or the job's end
                until = finish[name] if after is None else min(after, finish[name])
                gpu_s[name] += len(nodes) * max(until - t, 0.0)
        return cls(nodes_by_type, rounds, {job["name"]: float(job["submission_time"]) for job in last}, finish, gpu_s)

    def check_fits(self, cluster: Cluster, rows: Sequence[WorkloadJob], path: Path, interval_s: int) -> None:
        """Refuse a log of another cluster, round length or workload, naming what differs."""
        ours = {g.gpu_type: g.num_nodes for g in cluster.groups}
        if len(ours) != len(cluster.groups) or ours != dict(self.nodes_by_type):
            raise SpecError(
                f"{path}: Sia's run had nodes {dict(self.nodes_by_type)}, the replay cluster {ours} (one group per "
                "type, as Sia's clusters are): replay it on the cluster it ran on"
            )
        for t, held in self.rounds.items():
            if t % interval_s:
                raise SpecError(f"{path}: a round at {t} s; the replay's rounds are every {interval_s} s")
            for name, (gpu_type, nodes) in held.items():
                if max(nodes) >= ours.get(gpu_type, 0):
                    raise SpecError(
                        f"{path}: round {t}: {name} on {gpu_type} node {max(nodes)}; the cluster has {ours}"
                    )
        submitted = {row.name: row.submit_time_s for row in rows}
        differ = [n for n, t in self.submit_s.items() if submitted.get(n) != t] + sorted(
            set(submitted) - set(self.submit_s)
        )
        if differ:
            raise SpecError(f"{path}: jobs {differ[:3]} differ from the workload's; replay the log of this workload")


class SiaReplay(Policy):
    """Gives each job, every round, the GPUs Sia's run gave it then, on `cluster.scaled(2)`: Sia's node `i` of a
    type is that group's node `i`, and its spare twin is node `i` of the group's second half."""

    name: ClassVar[str] = "sia-replay"
    batch_owner = "job"

    def __init__(self, run: SiaRun, cluster: Cluster) -> None:
        self.run = run
        self.first_node: dict[str, int] = {}  # in the doubled cluster
        self.spare: dict[str, int] = {}  # how far a node's spare twin is
        node = 0
        for group in cluster.groups:
            self.first_node[group.gpu_type] = node
            self.spare[group.gpu_type] = group.num_nodes
            node += 2 * group.num_nodes
        self.last: dict[str, tuple[int, ...]] = {}  # each job's last allocation, on the spare nodes
        self.overrun: set[str] = set()

    def optimize(self, jobs: Sequence[JobView], cluster: Cluster, now: float) -> PolicyResult:
        held = self.run.rounds.get(round(now), {})
        placed: dict[str, tuple[int, ...]] = {}
        late = []
        for job in jobs:
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
        used = np.sum(list(placed.values()), axis=0) if placed else np.zeros(cluster.num_nodes, dtype=int)
        for job in late:
            spare = self.last.get(job.name)
            if spare is not None and np.all(used + spare <= cluster.node_gpus):
                placed[job.name] = spare
                used = used + spare
                self.overrun.add(job.name)
        return PolicyResult(placed)


@dataclass(frozen=True)
class Comparison:
    """One workload: our simulator's JCTs on Sia's schedule beside Sia's, and Sia's run itself."""

    sia: SiaRun
    ours_s: Mapping[str, float]
    overrun: frozenset[str] = field(default_factory=frozenset)

    @property
    def relative(self) -> np.ndarray:
        sia = self.sia.jct_s
        return np.array([self.ours_s[n] / sia[n] - 1 for n in sia])

    @property
    def avg_ratio(self) -> float:
        return float(np.mean(list(self.ours_s.values())) / np.mean(list(self.sia.jct_s.values())))

    @property
    def most_late_s(self) -> float:
        """How long past Sia's JCT the latest job that ran past Sia's schedule finished here."""
        sia = self.sia.jct_s
        return max((self.ours_s[n] - sia[n] for n in self.overrun), default=0.0)


def replay(workload: str | Path, log: Path, cluster_name: str = "sia-heterogeneous") -> Comparison:
    """Run `workload` (a name such as "philly/workload-1", or a CSV) on Sia's schedule from `log`, on the cluster
    Sia's run had (`cluster_name`, checked against the log)."""
    run = SiaRun.read(log)
    models = load_typed_models("sia-sosp23")
    rows = read_workload(workload, applications=models).jobs
    cluster = load_cluster(cluster_name)
    config = SimConfig(cluster=cluster.scaled(2))
    run.check_fits(cluster, rows, log, config.interval_s)
    result = simulate(rows, policy := SiaReplay(run, cluster), models, config)
    ours = {job.name: float(job.jct_s) for job in result.jobs if job.jct_s is not None}
    return Comparison(run, ours, frozenset(policy.overrun))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=Path, required=True, help="Sia's output folder of one trace")
    parser.add_argument("--trace", default="philly", choices=sorted(TRACES))
    args = parser.parse_args()
    logs = sorted(args.logs.glob("workload-*.log"), key=lambda p: int(p.stem.split("-")[1]))
    if not logs:
        raise SystemExit(f"{args.logs}: no workload-N.log files (Sia's multi_simulator.py --output writes them)")
    table = Table(title=f"{args.trace}: our simulator on Sia's schedules, against Sia's simulator")
    columns = ("workload", "avg JCT h ours / Sia", "avg", "median job", "p5 / p95 job", "jobs within 1%", "late")
    for column in columns:
        table.add_column(column, justify="left" if column == "workload" else "right")
    console = Console(width=150)
    runs = []
    for log in logs:
        c = replay(f"{args.trace}/{log.stem}", log)
        runs.append(c.sia)
        r = c.relative
        table.add_row(
            log.stem,
            f"{np.mean(list(c.ours_s.values())) / HOUR:.3f} / {np.mean(list(c.sia.jct_s.values())) / HOUR:.3f}",
            f"{c.avg_ratio - 1:+.2%}",
            f"{np.median(r):+.2%}",
            f"{np.percentile(r, 5):+.1%} / {np.percentile(r, 95):+.1%}",
            f"{np.mean(np.abs(r) <= 0.01):.0%}",
            f"{len(c.overrun)}, ≤ {c.most_late_s:.0f} s",
        )
    console.print(table)
    pooled = np.concatenate([list(run.jct_s.values()) for run in runs]) / HOUR
    console.print(
        f"Sia's simulator, from these logs (benchmarks.hetero's SIA_RERUN): avg JCT "
        f"{np.mean([np.mean(list(run.jct_s.values())) for run in runs]) / HOUR:.3f} h, "
        f"p99 {np.percentile(pooled, 99):.2f} h, makespan {np.mean([run.makespan_s for run in runs]) / HOUR:.2f} h, "
        f"GPU-h/job {np.mean([np.mean(list(run.gpu_s.values())) for run in runs]) / HOUR:.2f}"
    )


if __name__ == "__main__":
    main()
