"""Cloud auto-scaling (Pollux §5.4): how many nodes of each GPU type the cluster should have, from the jobs' goodput.

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

**GPU types.** A cluster of several types (the runtime's `--node-type`s) holds each type's node count within that
type's own bounds (`NodeType`), and the same rule runs once per type, over that type's GPUs only:

    UTILITY_t(A) = Σ_{j on t} SPEEDUP_{j,t}(A_j) / G_t

over the jobs the policy places on type t, SPEEDUP_{j,t} relative to one GPU of t (the job's model there, fitted or
bootstrapped: `model_on`). Each type has its own window; a type whose window leaves the band is searched over its own
[min, max] with the other types held at their counts, the types in name order, each search seeing the counts
decided before it. Why per type, not one utility over the whole cluster: a type's nodes cost by themselves, so idle
rtx nodes must be seen as idle even while the a100 nodes are busy (one pooled utility would average them away), and
a search over one type's count is still a search on a utility that falls as that type's nodes are added, which is
what the bisection needs. One type is exactly the artifact's rule (the simulator's setting, unchanged).

Two rules for a type that may hold no nodes (a minimum of 0, as a cloud allows): a type holding no node has no
utility to observe, so *it is searched at once* whenever a job waits that may run on it (with no node up at all,
every job waits): the runtime's cluster starts empty and must not wait a window to run its first job. In a search,
0 nodes of t counts as utility 0 when no job would run on one node of t (so an unused type stays at 0) and as
unbounded otherwise (a job the policy would place there must not be left without its node). And with
`idle_to_minimum`, a round without active jobs holds every type's minimum at once (the runtime: an idle cloud costs
money, and the next job grows the cluster at once); without it, rounds without jobs are not observed and change
nothing, the artifact's rule, which the simulator keeps (its minimum is at least 1 node, so the start rule never
fires there either).

Pure: no I/O, no clock (time comes in as `now`); the windows are the only state, held by `Autoscaler` in the open.
The simulator calls it between rounds (`pollux.sim.nodes`); the runtime calls the same `Autoscaler.step` each round
and asks Ray's autoscaler for `ScaleDecision.nodes_by_type` (`pollux.runtime.autoscale`).
"""

from __future__ import annotations

import copy
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from pollux.cluster import Allocation, Cluster, NodeGroup, num_nodes_used
from pollux.errors import SpecError
from pollux.policies.base import JobView, Policy
from pollux.policies.speedup import goodput_table
from pollux.policies.typed_search import model_on

LOW_UTILITY, HIGH_UTILITY = 0.35, 0.65  # the artifact's band (its PolluxPolicy's utilization thresholds)
WINDOW_ROUNDS = 15  # rounds averaged before a decision (the artifact's window, at its 60 s rounds)


@dataclass(frozen=True)
class NodeType:
    """One kind of node the cloud may start: its GPU type, GPUs per node, and the node counts allowed."""

    gpu_type: str
    gpus_per_node: int
    min_nodes: int
    max_nodes: int


@dataclass(frozen=True)
class AutoscaleSettings:
    """Bounds on the node count, the utility band to hold, and the rounds averaged before acting.

    `min_nodes`/`max_nodes` bound the one GPU type of the cluster (the simulator's setting); `node_types` instead
    gives each type its own bounds (`per_type`, the runtime's), and the totals are then the sums."""

    min_nodes: int
    max_nodes: int
    low_utility: float = LOW_UTILITY
    high_utility: float = HIGH_UTILITY
    window_rounds: int = WINDOW_ROUNDS
    node_types: tuple[NodeType, ...] = ()
    idle_to_minimum: bool = False  # with no active job, hold each type's minimum at once (module docstring)

    @classmethod
    def per_type(
        cls, node_types: Sequence[NodeType], *, window_rounds: int = WINDOW_ROUNDS, idle_to_minimum: bool = False
    ) -> AutoscaleSettings:
        """Settings that hold each of `node_types` within its own bounds (the artifact's band)."""
        low = sum(n.min_nodes for n in node_types)
        high = sum(n.max_nodes for n in node_types)
        return cls(
            low, high, window_rounds=window_rounds, node_types=tuple(node_types), idle_to_minimum=idle_to_minimum
        )

    def __post_init__(self) -> None:
        if not self.node_types and self.min_nodes < 1:
            raise SpecError(f"autoscaling min_nodes must be >= 1, got {self.min_nodes}")
        if self.max_nodes < self.min_nodes:
            raise SpecError(
                f"autoscaling max_nodes ({self.max_nodes}) is below min_nodes ({self.min_nodes}); "
                "give max_nodes >= min_nodes"
            )
        for node in self.node_types:
            if node.gpus_per_node < 1 or not 0 <= node.min_nodes <= node.max_nodes:
                raise SpecError(
                    f"autoscaling node type {node.gpu_type!r}: needs GPUs per node >= 1 and 0 <= min <= max, got "
                    f"{node.gpus_per_node} GPUs, [{node.min_nodes}, {node.max_nodes}] nodes"
                )
        if len({n.gpu_type for n in self.node_types}) < len(self.node_types):
            raise SpecError("autoscaling node types: each GPU type may be given once")
        if self.node_types and self.max_nodes < 1:
            raise SpecError("autoscaling node types: every maximum is 0; allow at least one node")
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

    def bounds(self, cluster: Cluster | None) -> dict[str, NodeType]:
        """Each type's bounds, in type-name order: `node_types`, else the cluster's one type within [min, max]. A
        type of `cluster` without bounds is held at the nodes it has."""
        if self.node_types:
            found = {n.gpu_type: n for n in self.node_types}
        elif cluster is None or cluster.heterogeneous:
            raise SpecError(
                "autoscaling by min_nodes/max_nodes handles clusters of one GPU type; give each type its bounds "
                f"(node_types) for {cluster.describe() if cluster else 'an empty cluster'}"
            )
        else:
            group = cluster.groups[0]
            found = {group.gpu_type: NodeType(group.gpu_type, group.gpus_per_node, self.min_nodes, self.max_nodes)}
        groups = cluster.groups if cluster is not None else ()
        for group in groups:
            if group.gpu_type not in found:
                count = sum(g.num_nodes for g in groups if g.gpu_type == group.gpu_type)
                found[group.gpu_type] = NodeType(group.gpu_type, group.gpus_per_node, count, count)
        return dict(sorted(found.items()))


@dataclass(frozen=True)
class ScaleDecision:
    """The node count wanted from this round on (in all, and per GPU type: `nodes_by_type`), the window's mean
    utility when it was full (None before; for several types, None: each type's is in `utility_by_type`), and why."""

    nodes: int
    utility: float | None
    reason: str
    nodes_by_type: Mapping[str, int] = field(default_factory=dict)
    resized: bool = False  # a search ran this round (the node count may still be the same)
    utility_by_type: Mapping[str, float] = field(default_factory=dict)  # full windows' means, this round


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
    return moved_to(allocation, [*kept, *([None] * (num_nodes - len(kept)))])


def moved_to(allocation: Allocation, sources: Sequence[int | None]) -> Allocation:
    """An allocation on a resized cluster whose node i was node `sources[i]` before (None: a new, empty node); a
    job that held GPUs on a node no longer there loses its whole allocation (`moved_allocation`)."""
    moved = tuple(allocation[s] if s is not None and s < len(allocation) else 0 for s in sources)
    if sum(moved) < sum(allocation):
        return (0,) * len(sources)
    return moved


def resized(
    cluster: Cluster | None,
    allocations: Sequence[Allocation],
    bounds: Mapping[str, NodeType],
    counts: Mapping[str, int],
) -> tuple[Cluster | None, list[int | None]]:
    """`cluster` with `counts[t]` nodes of each type t (None: no node at all), and where each of its nodes was
    (`moved_to`). Per type, the nodes given back are those `release_order` gives first; the kept ones stay in their
    order and new ones (of the type's size) follow them. One type: `with_nodes` and `kept_nodes`."""
    sources: list[int | None] = []
    sizes: list[tuple[str, int]] = []
    order = release_order(cluster, allocations) if cluster is not None else []
    node_types = cluster.node_types if cluster is not None else ()
    node_gpus = cluster.node_gpus if cluster is not None else ()
    for gpu_type, node in bounds.items():
        present = [n for n in order if node_types[n] == gpu_type]
        gone = set(present[: max(len(present) - counts[gpu_type], 0)])
        kept = sorted(n for n in present if n not in gone)
        sources += [*kept, *([None] * (counts[gpu_type] - len(kept)))]
        sizes += [(gpu_type, node_gpus[n]) for n in kept]
        sizes += [(gpu_type, node.gpus_per_node)] * (counts[gpu_type] - len(kept))
    groups: list[NodeGroup] = []
    for gpu_type, gpus in sizes:
        if groups and (groups[-1].gpu_type, groups[-1].gpus_per_node) == (gpu_type, gpus):
            groups[-1] = NodeGroup(gpu_type, groups[-1].num_nodes + 1, gpus)
        else:
            groups.append(NodeGroup(gpu_type, 1, gpus))
    return (Cluster.of_groups(groups) if groups else None), sources


class SpeedupTables:
    """Each job's speedup over its own single-GPU goodput, for K = 0…max GPUs, on one node and across nodes
    (`pollux.policies.speedup.goodput_table`); computed once per job (and GPU type, where one is asked for: the job's
    model there, `model_on`) and reused for every candidate cluster."""

    def __init__(self, jobs: Sequence[JobView], max_gpus: int) -> None:
        self._jobs = {job.name: job for job in jobs}
        self._max_gpus = max(max_gpus, 1)
        self._tables: dict[tuple[str, str | None], np.ndarray] = {}

    def _table(self, name: str, gpu_type: str | None) -> np.ndarray:
        if (name, gpu_type) not in self._tables:
            job = self._jobs[name]
            if gpu_type is not None:
                job = replace(job, throughput_params=model_on(job, gpu_type), local_bsz_bounds=job.bounds_on(gpu_type))
            goodput = goodput_table(job, self._max_gpus)
            base = float(goodput[0, 1]) if goodput[0, 1] > 0 else max(float(goodput.max()), 1e-12)
            self._tables[name, gpu_type] = goodput / base
        return self._tables[name, gpu_type]

    def speedup(self, job: str, allocation: Allocation, gpu_type: str | None = None) -> float:
        """SPEEDUP_j(A) (of the job's one model; with `gpu_type`, SPEEDUP_{j,t} of its model on that type)."""
        gpus = sum(allocation)
        if gpus == 0 or job not in self._jobs:
            return 0.0
        table = self._table(job, gpu_type)
        return float(table[int(num_nodes_used(allocation) > 1), min(gpus, table.shape[1] - 1)])


def cluster_utility(allocations: Mapping[str, Allocation], num_gpus: int, tables: SpeedupTables) -> float:
    """Σ_j SPEEDUP_j(A_j) / G: the artifact's goodput utility of an allocation on G GPUs (module docstring)."""
    return sum(tables.speedup(name, alloc) for name, alloc in allocations.items()) / max(num_gpus, 1)


def type_utilities(
    allocations: Mapping[str, Allocation], cluster: Cluster | None, tables: SpeedupTables, typed: bool
) -> dict[str, float]:
    """UTILITY_t for each type t of `cluster`: the speedups of the jobs on t (`typed`: of their models on t) over
    t's GPUs (module docstring). Untyped, on a cluster of one type: `cluster_utility`."""
    if cluster is None:
        return {}
    if not typed and not cluster.heterogeneous:
        return {cluster.gpu_types[0]: cluster_utility(allocations, cluster.num_gpus, tables)}
    total = dict.fromkeys(cluster.gpu_types, 0.0)
    for name, alloc in allocations.items():
        gpu_type = cluster.allocation_type(alloc)
        if gpu_type is not None:
            total[gpu_type] += tables.speedup(name, alloc, gpu_type)
    return {t: speedup / cluster.gpus_of_type(t) for t, speedup in total.items()}


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


class _Candidates:
    """The policy's allocation, and each type's utility, on `cluster` resized to given node counts per type. Pure:
    every candidate is answered by a copy of the policy, so a policy that remembers its last round (elastic-DP) is
    not disturbed by questions about clusters that may never exist."""

    def __init__(
        self,
        jobs: Sequence[JobView],
        cluster: Cluster | None,
        bounds: Mapping[str, NodeType],
        now: float,
        policy: Policy,
    ) -> None:
        self.jobs, self.cluster, self.bounds, self.now, self.policy = jobs, cluster, bounds, now, policy
        self.tables = SpeedupTables(jobs, sum(n.max_nodes * n.gpus_per_node for n in bounds.values()))
        self._seen: dict[tuple[int, ...], dict[str, float]] = {}

    def utilities(self, counts: Mapping[str, int]) -> dict[str, float]:
        key = tuple(counts[t] for t in self.bounds)
        if key not in self._seen:
            candidate, sources = resized(self.cluster, [job.allocation for job in self.jobs], self.bounds, counts)
            if candidate is None:
                self._seen[key] = {}
            else:
                views = [  # a job none of whose types the candidate has waits outside it, as in the runtime
                    replace(job, allocation=moved_to(job.allocation, sources))
                    for job in self.jobs
                    if any(job.may_run_on(t) for t in candidate.gpu_types)
                ]
                result = copy.deepcopy(self.policy).optimize(views, candidate, self.now)
                self._seen[key] = type_utilities(result.allocations, candidate, self.tables, len(self.bounds) > 1)
        return self._seen[key]

    def search(self, gpu_type: str, counts: Mapping[str, int], target: float) -> int:
        """The count of `gpu_type` within its bounds, the other types held at `counts`, whose utility is closest
        to `target`; 0 nodes counts as utility 0 if no job would run on one node of the type, else as unbounded."""

        def utility_at(num_nodes: int) -> float:
            if num_nodes == 0:
                return 0.0 if utility_at(1) == 0.0 else math.inf
            return self.utilities({**counts, gpu_type: num_nodes}).get(gpu_type, 0.0)

        node = self.bounds[gpu_type]
        return search_nodes(utility_at, node.min_nodes, node.max_nodes, target)


class Autoscaler:
    """The round-by-round rule (module docstring): a utility window per GPU type, and a search when its mean leaves
    the band (or at once, for a type without nodes that a waiting job may use).

    Its one piece of state is the windows of recent utilities; `step` is otherwise a function of its arguments."""

    def __init__(self, settings: AutoscaleSettings) -> None:
        self.settings = settings
        self._windows: dict[str, deque[float]] = {}

    def _window(self, gpu_type: str) -> deque[float]:
        return self._windows.setdefault(gpu_type, deque(maxlen=self.settings.window_rounds))

    def step(
        self,
        jobs: Sequence[JobView],
        cluster: Cluster | None,
        now: float,
        policy: Policy,
        num_nodes: int | Mapping[str, int] | None = None,
    ) -> ScaleDecision:
        """Observe this round's allocation (the jobs' views on `cluster`, the nodes ready now; None: no node is
        up) and say how many nodes of each type to hold: `num_nodes` (ready and booting, per type or, for one
        type, a count; default the ready ones), within each type's bounds, unless a type's window left the band or
        a waiting job needs a type without nodes. Rounds without jobs are not observed (the artifact's rule:
        nothing to measure); with `idle_to_minimum` they hold each type's minimum."""
        settings = self.settings
        bounds = settings.bounds(cluster)
        ready = {t: len(cluster.nodes_of_type(t)) if cluster is not None else 0 for t in bounds}
        if num_nodes is None:
            held = ready
        elif isinstance(num_nodes, int):
            held = {t: num_nodes for t in bounds}
        else:
            held = {t: num_nodes.get(t, ready[t]) for t in bounds}
        held = {t: min(max(held[t], node.min_nodes), node.max_nodes) for t, node in bounds.items()}
        if not jobs:
            if settings.idle_to_minimum:
                self._windows.clear()
                held = {t: node.min_nodes for t, node in bounds.items()}
            return self._decision(held, {}, "no active jobs")
        tables = SpeedupTables(jobs, cluster.num_gpus if cluster is not None else 0)
        for gpu_type, utility in type_utilities(
            {j.name: j.allocation for j in jobs}, cluster, tables, len(bounds) > 1
        ).items():
            self._window(gpu_type).append(utility)
        means: dict[str, float] = {}
        reasons: list[str] = []
        searched: list[str] = []
        for gpu_type, node in bounds.items():
            window = self._window(gpu_type)
            waiting = [j for j in jobs if sum(j.allocation) == 0 and j.may_run_on(gpu_type)]
            if held[gpu_type] == 0 and waiting and node.max_nodes > 0:
                searched.append(gpu_type)
                reasons.append(f"{gpu_type}: no node, {len(waiting)} job(s) waiting for one")
                continue
            if len(window) < settings.window_rounds:
                continue
            means[gpu_type] = mean = float(np.mean(window))
            low = mean < settings.low_utility and held[gpu_type] > node.min_nodes
            high = mean > settings.high_utility and held[gpu_type] < node.max_nodes
            if low or high:
                searched.append(gpu_type)
                reasons.append(f"{gpu_type} utility {mean:.2f} {'below' if low else 'above'} the band")
        if not searched:
            reason = "gathering utility" if not means else "utility within the band or at a bound"
            return self._decision(held, means, reason)
        candidates = _Candidates(jobs, cluster, bounds, now, policy)
        wanted = dict(held)
        for gpu_type in searched:
            self._window(gpu_type).clear()
            wanted[gpu_type] = candidates.search(gpu_type, wanted, settings.target_utility)
        changes = ", ".join(f"{t} {held[t]} -> {wanted[t]}" for t in searched)
        return self._decision(wanted, means, f"{'; '.join(reasons)}: {changes} nodes", resized=True)

    def _decision(
        self, counts: Mapping[str, int], means: Mapping[str, float], reason: str, resized: bool = False
    ) -> ScaleDecision:
        utility = next(iter(means.values())) if len(counts) == 1 and means else None
        return ScaleDecision(sum(counts.values()), utility, reason, dict(counts), resized, dict(means))
