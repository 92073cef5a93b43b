"""Elastic-DP autoscaler (Saxena et al., "Effective Elastic Scaling of Deep Learning Workloads", MASCOTS'20).

Every job has a GPU range [min, max] and may train at any total batch M in [M0, max batch] (per-GPU batch within its
bounds). At each arrival and completion (nothing else moves jobs, so between those events they run undisturbed), a
dynamic program over (jobs × GPUs) picks each admitted job's GPU count, and with it the batch, that maximize the
cluster's total throughput in samples/s:

    F_j(g) = max_{k ∈ [lo_j, hi_j]} F_{j−1}(g − k) + RATE_j(k)      F_0 ≡ 0,  answer F_J(G), then backtrack

RATE_j(k) is the job's throughput model (Pollux §3.2) at k GPUs and its throughput-maximizing batch: the largest
per-GPU batch the bounds allow, with gradient accumulation only where k GPUs at the largest per-GPU batch cannot
reach M0 (M/T_iter rises with the per-GPU batch m because every term of T_iter/m falls with m). Admission is strict
FIFO: jobs are admitted oldest first while their minimums fit; the first that does not waits, and so does everyone
behind it. Every admitted job gets at least its minimum.

On a cluster of several GPU types the program stays blind to types (it counts the cluster's GPUs, and each job's
at most those of its largest type); then each job is given one type (`assign_types`: a job keeping its count keeps
its type, the others, largest first, the type with most GPUs left that holds them, or, where none does, as many as
the roomiest one has left) and is placed on that type's nodes.

Cost: one row of the table per job, each a max over that job's candidate counts for every g, vectorized with numpy:
O(Σ_j (hi_j − lo_j + 1) · G) ≤ O(J · G²) time and O(J · G) memory for the backtracking table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from pollux.cluster import Allocation, Cluster, free_gpus
from pollux.goodput import throughput
from pollux.policies.base import BatchConfig, BatchOwner, JobView, Policy, PolicyResult
from pollux.policies.placement import (
    NodeSizes,
    allowed_types,
    in_submit_order,
    largest_type_gpus,
    never_fits,
    of_type,
    place_most_free,
    take,
)

# Samples/s per GPU assumed for a job that has not run yet (no throughput model): linear scaling from a rate far
# below any real job's, so the program gives it its minimum and only GPUs that nobody else can use.
NOMINAL_RATE_PER_GPU = 1e-3


@dataclass(frozen=True)
class RateTable:
    """Best throughput of one job at each GPU count k = 0…hi, and the batch that reaches it."""

    rate: np.ndarray  # samples/s; -inf where k is outside the job's range or no batch fits
    local_bsz: np.ndarray
    accum_steps: np.ndarray

    @property
    def counts(self) -> np.ndarray:
        """The GPU counts the job may run on."""
        return np.flatnonzero(np.isfinite(self.rate))


def rate_table(job: JobView, max_gpus: int, node_gpus: NodeSizes) -> RateTable:
    """Throughput at the throughput-maximizing batch for every count in [max(min_gpus, 1), max_gpus].

    A count is feasible when some M = k·m·(s+1) in [M0, max batch] has m within the per-GPU bounds; s is the least
    accumulation that reaches M0, m the largest per-GPU batch left under the max batch. k GPUs are taken to span the
    fewest nodes that hold them (`node_gpus`: every node's size, or one size for all).
    """
    k = np.arange(max_gpus + 1)
    lo_m, hi_m = job.local_bsz_bounds
    m0, top = job.init_batch_size, job.max_batch_size
    gpus = np.maximum(k, 1)
    accum = np.maximum(-(-m0 // (gpus * hi_m)) - 1, 0)
    per_step = gpus * (accum + 1)
    local = np.minimum(hi_m, top // per_step)
    feasible = (k >= max(job.min_gpus, 1)) & (local >= np.maximum(lo_m, -(-m0 // per_step)))
    local = np.where(feasible, local, 0)
    if job.throughput_params is None:
        rate = NOMINAL_RATE_PER_GPU * k.astype(np.float64)
    else:
        if isinstance(node_gpus, int):
            nodes = -(-gpus // node_gpus)
        else:  # the largest nodes first: the n-th node is needed once k passes the n - 1 largest
            nodes = np.searchsorted(np.cumsum(sorted(node_gpus, reverse=True)), gpus) + 1
        rate = throughput(job.throughput_params, nodes, gpus, np.maximum(local, 1), accum)
    return RateTable(np.where(feasible, rate, -np.inf), local, np.where(feasible, accum, 0))


def best_counts(tables: Sequence[RateTable], num_gpus: int) -> list[int]:
    """The dynamic program: GPU counts (each within its table's feasible counts) of largest total rate using at
    most `num_gpus` GPUs. Ties go to fewer GPUs for the later job. The caller guarantees the minimums fit."""
    g = np.arange(num_gpus + 1)
    best = np.zeros(num_gpus + 1)  # F(g): best total rate of the jobs so far on at most g GPUs
    choice = np.zeros((len(tables), num_gpus + 1), dtype=np.int32)
    for j, table in enumerate(tables):
        ks = table.counts
        ks = ks[ks <= num_gpus]
        rest = g[None, :] - ks[:, None]
        candidates = np.where(rest >= 0, best[np.maximum(rest, 0)] + table.rate[ks][:, None], -np.inf)
        pick = np.argmax(candidates, axis=0)
        best = candidates[pick, g]
        choice[j] = ks[pick]
    counts = [0] * len(tables)
    left = num_gpus
    for j in reversed(range(len(tables))):
        counts[j] = int(choice[j, left])
        left -= counts[j]
    return counts


class ElasticDPPolicy(Policy):
    """Total-throughput autoscaler: GPU counts and batch sizes by dynamic program, at arrivals and completions."""

    name: ClassVar[str] = "elastic-dp"
    batch_owner: ClassVar[BatchOwner] = "policy"  # it picks each job's batch (PolicyResult.batch)

    def __init__(self) -> None:
        # The only state: what the last decision was made for, so that rounds without an arrival or a completion
        # keep it (the autoscaler is event-driven).
        self._active: frozenset[str] | None = None
        self._batch: dict[str, BatchConfig] = {}
        self._reasons: dict[str, str] = {}

    def optimize(self, jobs: Sequence[JobView], cluster: Cluster, now: float) -> PolicyResult:
        active = frozenset(job.name for job in jobs)
        if active == self._active:
            return self._keep(jobs)
        self._active = active
        ordered = in_submit_order(jobs)
        admitted, tables, reasons = self._admit(ordered, cluster)
        counts = best_counts(tables, cluster.num_gpus)
        types, counts = assign_types(admitted, tables, counts, cluster, reasons)
        allocations = place(admitted, counts, cluster, types)
        batch = {}
        for job, table, k in zip(admitted, tables, counts, strict=True):
            if k > 0:
                gpu_type = types.get(job.name)
                if cluster.heterogeneous and gpu_type is not None and job.bounds_on(gpu_type) != job.local_bsz_bounds:
                    # The counts were chosen blind to types; the batch must fit the memory of the type it got.
                    sizes = [cluster.node_gpus[n] for n in cluster.nodes_of_type(gpu_type)]
                    typed = rate_table(replace(job, local_bsz_bounds=job.bounds_on(gpu_type)), k, sizes)
                    table = typed if np.isfinite(typed.rate[k]) else table
                batch[job.name] = BatchConfig(int(table.local_bsz[k]), int(table.accum_steps[k]))
        self._batch, self._reasons = batch, reasons
        total = float(sum(table.rate[k] for table, k in zip(tables, counts, strict=True) if k > 0))
        return PolicyResult(allocations, reasons, batch, info={"reacted": True, "throughput_samples_s": total})

    def _keep(self, jobs: Sequence[JobView]) -> PolicyResult:
        """No arrival or completion since the last decision: every job stays as it is."""
        allocations = {job.name: tuple(job.allocation) for job in jobs if sum(job.allocation) > 0}
        batch = {name: config for name, config in self._batch.items() if name in allocations}
        reasons = {
            job.name: self._reasons.get(job.name, "waiting: no arrival or completion since the last decision")
            for job in jobs
            if job.name not in allocations
        }
        return PolicyResult(allocations, reasons, batch, info={"reacted": False})

    @staticmethod
    def _admit(ordered: list[JobView], cluster: Cluster) -> tuple[list[JobView], list[RateTable], dict[str, str]]:
        """Oldest first while the minimums fit (strict FIFO: the first job that does not fit blocks the rest);
        jobs that could never run anywhere do not block."""
        admitted: list[JobView] = []
        tables: list[RateTable] = []
        reasons: dict[str, str] = {}
        reserved = 0
        blocker: str | None = None
        for job in ordered:
            capacity = largest_type_gpus(cluster, job)
            table = rate_table(job, max(0, min(job.max_gpus, capacity)), cluster.node_gpus)
            counts = table.counts
            if capacity == 0:
                reasons[job.name] = f"waiting: {never_fits(cluster, capacity)}"
                continue
            if counts.size == 0:
                lo_m, hi_m = job.local_bsz_bounds
                reasons[job.name] = (
                    f"waiting: no GPU count in [{max(job.min_gpus, 1)}, {job.max_gpus}] of {cluster.num_gpus} GPUs "
                    f"runs a batch in [{job.init_batch_size}, {job.max_batch_size}] at {lo_m}..{hi_m} per GPU"
                )
                continue
            minimum = int(counts[0])
            if blocker is None and reserved + minimum > cluster.num_gpus:
                blocker = job.name
            if blocker is not None:
                ahead = "" if blocker == job.name else f" behind {blocker} (FIFO)"
                reasons[job.name] = (
                    f"waiting: needs at least {minimum} GPUs, {cluster.num_gpus - reserved} left after the minimums "
                    f"of {len(admitted)} older jobs{ahead}"
                )
                continue
            reserved += minimum
            admitted.append(job)
            tables.append(table)
        return admitted, tables, reasons


def assign_types(
    jobs: Sequence[JobView],
    tables: Sequence[RateTable],
    counts: Sequence[int],
    cluster: Cluster,
    reasons: dict[str, str],
) -> tuple[dict[str, str], list[int]]:
    """One GPU type per job with GPUs, and the counts that type leaves it (`reasons` gains a line for each job left
    without any).

    A job keeping its count keeps its type. The others, largest first (ties: FIFO), take the type they may use
    with most GPUs left that holds their count (ties: the cluster's order); where none holds it, the largest count
    of their table that the roomiest such type still holds, or none. On a cluster of one type every count fits."""
    left = {t: cluster.gpus_of_type(t) for t in cluster.gpu_types}
    types: dict[str, str] = {}
    counts = list(counts)
    order = sorted(range(len(jobs)), key=lambda i: -counts[i])
    keeping = [i for i in order if counts[i] > 0 and _kept_type(jobs[i], counts[i], cluster) is not None]
    for i in keeping:
        gpu_type = _kept_type(jobs[i], counts[i], cluster)
        assert gpu_type is not None
        types[jobs[i].name] = gpu_type
        left[gpu_type] -= counts[i]
    for i in order:
        job = jobs[i]
        if counts[i] == 0 or job.name in types:
            continue
        options = sorted(allowed_types(cluster, job), key=lambda t: -left[t])  # stable: the cluster's order on ties
        holding = [t for t in options if left[t] >= counts[i]]
        if holding:
            gpu_type = holding[0]
        else:
            feasible = tables[i].counts
            fitting = feasible[feasible <= (left[options[0]] if options else 0)]
            if not fitting.size:
                reasons[job.name] = (
                    f"waiting: its {counts[i]} GPUs fit no GPU type it may use after larger jobs took theirs"
                )
                counts[i] = 0
                continue
            gpu_type, counts[i] = options[0], int(fitting[-1])
        types[job.name] = gpu_type
        left[gpu_type] -= counts[i]
    return types, counts


def _kept_type(job: JobView, count: int, cluster: Cluster) -> str | None:
    """The type of a job's allocation when it keeps it (unchanged count, an allowed type), else None."""
    alloc = job.allocation
    if len(alloc) != cluster.num_nodes or sum(alloc) != count or min(alloc, default=0) < 0:
        return None
    gpu_type = cluster.allocation_type(alloc)
    return gpu_type if gpu_type is not None and job.may_run_on(gpu_type) else None


def place(
    jobs: Sequence[JobView], counts: Sequence[int], cluster: Cluster, types: Mapping[str, str] | None = None
) -> dict[str, Allocation]:
    """Per-node allocations for the chosen counts, packed so that only jobs that need several nodes span them.

    A job whose count is unchanged keeps its nodes (no restart). Then, largest first, jobs take whole free nodes for
    the part of their count that fills nodes (the largest nodes first); then the jobs that fit one node, and after
    them the remainders of larger jobs, go best-fit to the fullest node that holds them. Whatever finds no such spot
    spreads over the nodes with most free GPUs. Each job stays on the nodes of its GPU type (`types`, from
    `assign_types`; may be left out on a cluster of one type), whose GPUs the counts never exceed, so that always
    succeeds.
    """
    if types is None:
        if cluster.heterogeneous:
            raise ValueError("elastic-dp place: a cluster of several GPU types needs each job's type (assign_types)")
        types = {job.name: cluster.gpu_types[0] for job in jobs}
    want = {job.name: k for job, k in zip(jobs, counts, strict=True)}
    allocations: dict[str, Allocation] = {
        job.name: tuple(job.allocation)
        for job in jobs
        if want[job.name] > 0
        and len(job.allocation) == cluster.num_nodes
        and sum(job.allocation) == want[job.name]
        and cluster.allocation_type(job.allocation) == types[job.name]
    }
    free = free_gpus(cluster, allocations)
    if min(free, default=0) < 0:  # the views over-commit a node: place everything afresh
        allocations, free = {}, free_gpus(cluster, {})
    pending = [job.name for job in jobs if want[job.name] > 0 and job.name not in allocations]
    pending.sort(key=lambda name: -want[name])  # stable: equal sizes keep FIFO order
    for gpu_type in cluster.gpu_types:
        mine = [name for name in pending if types[name] == gpu_type]
        allocations.update(_pack(mine, want, free, gpu_type, cluster))
    return allocations


def _pack(
    names: Sequence[str], want: Mapping[str, int], free: list[int], gpu_type: str, cluster: Cluster
) -> dict[str, Allocation]:
    """`place`'s packing of `names`, largest first, onto the nodes of `gpu_type`, updating `free`."""
    size, nodes = cluster.node_gpus, cluster.nodes_of_type(gpu_type)
    by_size = sorted(nodes, key=lambda node: (-size[node], node))
    largest = size[by_size[0]]
    placed: dict[str, Allocation] = {}
    partial: dict[str, list[int]] = {}
    spill = []  # no whole nodes left for them: spread at the end
    for name in names:
        whole: list[int] = []
        if want[name] >= largest:  # jobs that fit one node take no whole nodes
            whole = _whole_nodes(want[name], [n for n in by_size if free[n] == size[n]], size)
            if sum(size[n] for n in whole) < sum(size[n] for n in _whole_nodes(want[name], by_size, size)):
                spill.append(name)
                continue
        partial[name] = [size[node] if node in whole else 0 for node in range(cluster.num_nodes)]
        for node in whole:
            free[node] = 0
    for name in sorted(partial, key=lambda name: want[name] > largest):  # single-node jobs before remainders
        rest = want[name] - sum(partial[name])
        holes = [node for node in nodes if free[node] >= rest]
        if rest and holes:
            node = min(holes, key=lambda node: (free[node], node))
            partial[name][node] += rest
            free[node] -= rest
        elif rest:
            _add(partial[name], _spread(free, rest, gpu_type, cluster))
        placed[name] = tuple(partial[name])
    for name in spill:
        placed[name] = _spread(free, want[name], gpu_type, cluster)
    return placed


def _whole_nodes(gpus: int, candidates: Sequence[int], size: Sequence[int]) -> list[int]:
    """Whole nodes among `candidates` (in order) for the part of `gpus` that fills nodes: each node taken is no
    larger than what is still left to place."""
    taken = []
    for node in candidates:
        if size[node] <= gpus:
            taken.append(node)
            gpus -= size[node]
    return taken


def _spread(free: list[int], gpus: int, gpu_type: str, cluster: Cluster) -> Allocation:
    """Take `gpus` from the nodes of `gpu_type` with most free GPUs (updating `free`)."""
    alloc = place_most_free(free if len(cluster.gpu_types) == 1 else of_type(cluster, free, gpu_type), gpus)
    if alloc is None:  # cannot happen: the program hands out at most the cluster's GPUs
        raise AssertionError(f"elastic-dp handed out {gpus} GPUs more than are free")
    take(free, alloc)
    return alloc


def _add(alloc: list[int], extra: Allocation) -> None:
    for node, gpus in enumerate(extra):
        alloc[node] += gpus
