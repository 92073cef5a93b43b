"""Cloud auto-scaling (Pollux §5.4): how many nodes the cluster should have, from the jobs' goodput.

Pollux knows each job's goodput on any allocation, so it can tell whether the GPUs it holds are worth their cost.
The measure is the Pollux artifact's **cluster utility**: for the allocation A the policy finds on a cluster of G
GPUs,

    UTILITY(A) = Σ_j SPEEDUP_j(A_j) / G,   SPEEDUP_j(A_j) = max goodput_j on A_j / max goodput_j on 1 GPU

(a job not yet measured scales linearly, SPEEDUP = K; a waiting job counts 0). It is the fraction of the cluster's
GPUs doing useful work, in units of one job's single-GPU goodput: 1 when every GPU runs a job that would scale
perfectly, lower for idle GPUs and for GPUs that add throughput at a poor statistical efficiency. We chose it over
the policy's own fitness (a power mean of speedups over the fair share) because it compares across cluster sizes:
the fair share, hence the fitness, changes with G, while a GPU's goodput relative to one GPU does not.

The rule is the artifact's: every round the utility of the current allocation joins a window of the last
`window_rounds` rounds (15 at 60 s rounds); once the window is full and its mean lies outside the band
[`low_utility`, `high_utility`] (the artifact's 0.35-0.65) while the cluster may still shrink (or grow), a binary
search over [min_nodes, max_nodes] finds the node count whose utility, with the policy's allocation on that many
nodes, lies closest to the band's middle; the window then starts afresh, so a change has time to show its effect.
Utility falls as nodes are added (more GPUs for the same jobs), which is what makes the bisection valid.

Pure: no I/O, no clock (time comes in as `now`); the window is the only state, held by `Autoscaler` in the open.
The simulator calls it between rounds; the runtime can call the same `Autoscaler.step` each round and ask its
cloud (Ray's autoscaler) for `ScaleDecision.nodes_by_type`. One GPU type for now (the artifact's setting); typed
clusters are the extension point of `ScaleDecision.nodes_by_type` and `with_nodes`: search each type's group in turn
with the others held, over the same utility.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from pollux.cluster import Allocation, Cluster, NodeGroup, num_nodes_used
from pollux.errors import SpecError
from pollux.policies.base import JobView, Policy
from pollux.policies.pollux import goodput_table

LOW_UTILITY, HIGH_UTILITY = 0.35, 0.65  # the artifact's band (its PolluxPolicy's utilization thresholds)
WINDOW_ROUNDS = 15  # rounds averaged before a decision (the artifact's window, at its 60 s rounds)


@dataclass(frozen=True)
class AutoscaleSettings:
    """Bounds on the node count, the utility band to hold, and the rounds averaged before acting."""

    min_nodes: int
    max_nodes: int
    low_utility: float = LOW_UTILITY
    high_utility: float = HIGH_UTILITY
    window_rounds: int = WINDOW_ROUNDS

    def __post_init__(self) -> None:
        if self.min_nodes < 1:
            raise SpecError(f"autoscaling min_nodes must be >= 1, got {self.min_nodes}")
        if self.max_nodes < self.min_nodes:
            raise SpecError(
                f"autoscaling max_nodes ({self.max_nodes}) is below min_nodes ({self.min_nodes}); "
                "give max_nodes >= min_nodes"
            )
        if not 0.0 <= self.low_utility < self.high_utility:
            raise SpecError(
                f"autoscaling utility band must satisfy 0 <= low < high, got [{self.low_utility}, {self.high_utility}]"
            )
        if self.window_rounds < 1:
            raise SpecError(f"autoscaling window_rounds must be >= 1, got {self.window_rounds}")

    @property
    def target_utility(self) -> float:
        """The band's middle, which a resize aims at."""
        return (self.low_utility + self.high_utility) / 2


@dataclass(frozen=True)
class ScaleDecision:
    """The node count wanted from this round on (of the cluster's one GPU type: `nodes_by_type`), the window's
    mean utility when it was full (None before), and why."""

    nodes: int
    utility: float | None
    reason: str
    nodes_by_type: Mapping[str, int] = field(default_factory=dict)
    resized: bool = False  # a search ran this round (the node count may still be the same)


def with_nodes(cluster: Cluster, num_nodes: int) -> Cluster:
    """`cluster` with `num_nodes` nodes of its one kind."""
    (group,) = cluster.groups
    return Cluster.of_groups([NodeGroup(group.gpu_type, num_nodes, group.gpus_per_node)])


def release_order(cluster: Cluster, allocations: Sequence[Allocation]) -> list[int]:
    """The order in which nodes are given back when the cluster shrinks: fewest GPUs in use first (free nodes
    cost no job a restart), the highest-numbered first among equals."""
    used = np.zeros(cluster.num_nodes, dtype=np.int64)
    for alloc in allocations:
        used[: len(alloc)] += np.asarray(alloc, dtype=np.int64)[: cluster.num_nodes]
    return sorted(range(cluster.num_nodes), key=lambda n: (int(used[n]), -n))


def kept_nodes(cluster: Cluster, allocations: Sequence[Allocation], num_nodes: int) -> list[int]:
    """Which of `cluster`'s nodes stay, in their order, when it shrinks to `num_nodes`."""
    gone = set(release_order(cluster, allocations)[: max(cluster.num_nodes - num_nodes, 0)])
    return [n for n in range(cluster.num_nodes) if n not in gone]


def moved_allocation(allocation: Allocation, kept: Sequence[int], num_nodes: int) -> Allocation:
    """An allocation on the nodes `kept` (renumbered in order) of a cluster now `num_nodes` large: new nodes are
    appended empty. A job that held GPUs on a node given back loses its whole allocation (it is checkpointed at the
    round's boundary and the policy places it again, paying a restart)."""
    moved = tuple(allocation[n] for n in kept)
    if sum(moved) < sum(allocation):
        return (0,) * num_nodes
    return moved + (0,) * (num_nodes - len(moved))


class SpeedupTables:
    """Each job's speedup over its own single-GPU goodput, for K = 0…max GPUs, on one node and across nodes
    (`pollux.policies.pollux.goodput_table`); computed once per job and reused for every candidate cluster."""

    def __init__(self, jobs: Sequence[JobView], max_gpus: int) -> None:
        self._tables: dict[str, np.ndarray] = {}
        for job in jobs:
            goodput = goodput_table(job, max(max_gpus, 1))
            base = float(goodput[0, 1]) if goodput[0, 1] > 0 else max(float(goodput.max()), 1e-12)
            self._tables[job.name] = goodput / base

    def speedup(self, job: str, allocation: Allocation) -> float:
        gpus = sum(allocation)
        if gpus == 0 or job not in self._tables:
            return 0.0
        table = self._tables[job]
        return float(table[int(num_nodes_used(allocation) > 1), min(gpus, table.shape[1] - 1)])


def cluster_utility(allocations: Mapping[str, Allocation], num_gpus: int, tables: SpeedupTables) -> float:
    """Σ_j SPEEDUP_j(A_j) / G: the artifact's goodput utility of an allocation on G GPUs (module docstring)."""
    return sum(tables.speedup(name, alloc) for name, alloc in allocations.items()) / max(num_gpus, 1)


def candidate_utility(
    jobs: Sequence[JobView], cluster: Cluster, num_nodes: int, now: float, policy: Policy, tables: SpeedupTables
) -> float:
    """Utility of the allocation `policy` finds for `jobs` on `cluster` resized to `num_nodes` nodes.

    The policy is a copy, so a policy that remembers its last round (elastic-DP) is not disturbed by questions
    about clusters that may never exist."""
    candidate = with_nodes(cluster, num_nodes)
    kept = kept_nodes(cluster, [job.allocation for job in jobs], num_nodes)
    views = [replace(job, allocation=moved_allocation(job.allocation, kept, num_nodes)) for job in jobs]
    result = copy.deepcopy(policy).optimize(views, candidate, now)
    return cluster_utility(result.allocations, candidate.num_gpus, tables)


def search_nodes(utility_at: Callable[[int], float], low: int, high: int, target: float) -> int:
    """The node count in [low, high] whose utility is closest to `target`, by bisection on a utility that falls as
    nodes are added; the smaller count wins a tie (it costs less)."""
    if utility_at(low) <= target:
        return low
    if utility_at(high) >= target:
        return high
    while high - low > 1:  # utility_at(low) > target > utility_at(high)
        middle = (low + high) // 2
        if utility_at(middle) > target:
            low = middle
        else:
            high = middle
    return low if abs(utility_at(low) - target) <= abs(utility_at(high) - target) else high


def desired_nodes(
    jobs: Sequence[JobView], cluster: Cluster, now: float, policy: Policy, settings: AutoscaleSettings
) -> int:
    """The node count (of `cluster`'s one GPU type) whose policy allocation holds utility closest to the band's
    middle. Pure: every candidate is answered by a copy of the policy."""
    per_node = cluster.groups[0].gpus_per_node
    tables = SpeedupTables(jobs, settings.max_nodes * per_node)
    seen: dict[int, float] = {}

    def utility_at(num_nodes: int) -> float:
        if num_nodes not in seen:
            seen[num_nodes] = candidate_utility(jobs, cluster, num_nodes, now, policy, tables)
        return seen[num_nodes]

    return search_nodes(utility_at, settings.min_nodes, settings.max_nodes, settings.target_utility)


class Autoscaler:
    """The round-by-round rule (module docstring): the utility window, and a search when its mean leaves the band.

    Its one piece of state is the window of recent utilities; `step` is otherwise a function of its arguments."""

    def __init__(self, settings: AutoscaleSettings) -> None:
        self.settings = settings
        self._window: deque[float] = deque(maxlen=settings.window_rounds)

    def step(
        self, jobs: Sequence[JobView], cluster: Cluster, now: float, policy: Policy, num_nodes: int | None = None
    ) -> ScaleDecision:
        """Observe this round's allocation (the jobs' views on `cluster`, the nodes ready now) and say how many
        nodes to hold: `num_nodes` (ready and booting, default the ready ones) unless the window's mean left the
        band. Rounds without jobs are not observed (the artifact's rule: nothing to measure)."""
        settings = self.settings
        if cluster.heterogeneous:
            raise SpecError(
                f"autoscaling handles clusters of one GPU type; {cluster.describe()} has {len(cluster.gpu_types)}"
            )
        gpu_type = cluster.gpu_types[0]
        held = cluster.num_nodes if num_nodes is None else num_nodes
        if not jobs:
            return ScaleDecision(held, None, "no active jobs", {gpu_type: held})
        tables = SpeedupTables(jobs, cluster.num_gpus)
        self._window.append(cluster_utility({job.name: job.allocation for job in jobs}, cluster.num_gpus, tables))
        if len(self._window) < settings.window_rounds:
            return ScaleDecision(held, None, "gathering utility", {gpu_type: held})
        mean = float(np.mean(self._window))
        low = mean < settings.low_utility and held > settings.min_nodes
        high = mean > settings.high_utility and held < settings.max_nodes
        if not (low or high):
            return ScaleDecision(held, mean, "utility within the band or at a bound", {gpu_type: held})
        self._window.clear()
        wanted = desired_nodes(jobs, cluster, now, policy, settings)
        reason = f"utility {mean:.2f} {'below' if low else 'above'} the band: {held} -> {wanted} nodes"
        return ScaleDecision(wanted, mean, reason, {gpu_type: wanted}, resized=True)
