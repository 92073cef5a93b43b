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

Cost: one row of the table per job, each a max over that job's candidate counts for every g, vectorized with numpy:
O(Σ_j (hi_j − lo_j + 1) · G) ≤ O(J · G²) time and O(J · G) memory for the backtracking table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from pollux.cluster import Allocation, Cluster, free_gpus
from pollux.goodput import throughput
from pollux.policies.base import BatchConfig, BatchOwner, JobView, Policy, PolicyResult
from pollux.policies.placement import in_submit_order, place_most_free, take

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


def rate_table(job: JobView, max_gpus: int, gpus_per_node: int) -> RateTable:
    """Throughput at the throughput-maximizing batch for every count in [max(min_gpus, 1), max_gpus].

    A count is feasible when some M = k·m·(s+1) in [M0, max batch] has m within the per-GPU bounds; s is the least
    accumulation that reaches M0, m the largest per-GPU batch left under the max batch.
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
        nodes = -(-gpus // gpus_per_node)
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
        allocations = place(admitted, counts, cluster)
        batch = {}
        for job, table, k in zip(admitted, tables, counts, strict=True):
            batch[job.name] = BatchConfig(int(table.local_bsz[k]), int(table.accum_steps[k]))
        self._batch, self._reasons = batch, reasons
        total = float(sum(table.rate[k] for table, k in zip(tables, counts, strict=True)))
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
            table = rate_table(job, max(0, min(job.max_gpus, cluster.num_gpus)), cluster.gpus_per_node)
            counts = table.counts
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


def place(jobs: Sequence[JobView], counts: Sequence[int], cluster: Cluster) -> dict[str, Allocation]:
    """Per-node allocations for the chosen counts, packed so that only jobs that need several nodes span them.

    A job whose count is unchanged keeps its nodes (no restart). Then, largest first, jobs take whole free nodes for
    their multiples of a node; then the jobs that fit one node, and after them the remainders of larger jobs, go
    best-fit to the fullest node that holds them. Whatever finds no such spot spreads over the nodes with most free
    GPUs (the program never hands out more GPUs than the cluster has, so that always succeeds).
    """
    gpn = cluster.gpus_per_node
    want = {job.name: k for job, k in zip(jobs, counts, strict=True)}
    allocations: dict[str, Allocation] = {
        job.name: tuple(job.allocation)
        for job in jobs
        if want[job.name] > 0 and len(job.allocation) == cluster.num_nodes and sum(job.allocation) == want[job.name]
    }
    free = free_gpus(cluster, allocations)
    if min(free, default=0) < 0:  # the views over-commit a node: place everything afresh
        allocations, free = {}, free_gpus(cluster, {})
    pending = [job.name for job in jobs if want[job.name] > 0 and job.name not in allocations]
    pending.sort(key=lambda name: -want[name])  # stable: equal sizes keep FIFO order
    partial: dict[str, list[int]] = {}
    spill = []  # no whole nodes left for them: spread at the end
    for name in pending:
        whole = [node for node, f in enumerate(free) if f == gpn][: want[name] // gpn]
        if len(whole) < want[name] // gpn:
            spill.append(name)
            continue
        partial[name] = [gpn if node in whole else 0 for node in range(cluster.num_nodes)]
        for node in whole:
            free[node] = 0
    for name in sorted(partial, key=lambda name: want[name] > gpn):  # single-node jobs before remainders
        rest = want[name] % gpn
        holes = [node for node, f in enumerate(free) if f >= rest]
        if rest and holes:
            node = min(holes, key=lambda node: (free[node], node))
            partial[name][node] += rest
            free[node] -= rest
        elif rest:
            _add(partial[name], _spread(free, rest))
        allocations[name] = tuple(partial[name])
    for name in spill:
        allocations[name] = _spread(free, want[name])
    return allocations


def _spread(free: list[int], gpus: int) -> Allocation:
    """Take `gpus` from the nodes with most free GPUs (updating `free`)."""
    alloc = place_most_free(free, gpus)
    if alloc is None:  # cannot happen: the program hands out at most the cluster's GPUs
        raise AssertionError(f"elastic-dp handed out {gpus} GPUs more than are free")
    take(free, alloc)
    return alloc


def _add(alloc: list[int], extra: Allocation) -> None:
    for node, gpus in enumerate(extra):
        alloc[node] += gpus
