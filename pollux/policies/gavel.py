"""Gavel (Narayanan et al., OSDI'20), policy `max_sum_throughput_perf`, with the workload's rigid jobs
("TunedJobs"), as the Sia paper (Jayaram Subramanya et al., SOSP'23) compared against it on clusters of several
GPU types (docs/design.md, "Gavel").

Every round (360 s, `round_s`), two steps:

1. **Time fractions (Gavel §3.1, §4.2).** X[j, t] = the fraction of time job j should run on type t, the solution of

       maximize Σ_j Σ_t throughput[j, t] · X[j, t]
       s.t.     Σ_t X[j, t] ≤ 1                                (a job runs on one type at a time)
                Σ_j requested_gpus[j] · X[j, t] ≤ GPUs of type t
                X ≥ 0, and X[j, t] = 0 where the job cannot run on t

   a linear program (HiGHS); identical jobs then share their group's time alike (`equal_shares`), as the interior-
   point solver of the Sia artifact's Gavel (ECOS) gives it. Throughput = optimizer steps per second of the job's
   fixed batch on its requested GPUs of that type, packed on as few nodes as possible, at the per-GPU split of
   `fixed_batch_config`: where that type's memory cannot hold ⌈batch / GPUs⌉ examples per GPU, with gradient
   accumulation, as the job then runs (and as the Sia artifact's Gavel rates it; steps, not examples, per second, as
   it does too: `pollux.policies.tuned_jobs`, shared with Themis). Gavel's code does not normalize this policy's
   throughputs (its `ThroughputSumWithPerf` computes a per-job scale and never uses it), and neither do we. A job
   cannot run on a type it may not use or that has fewer GPUs than it requests.
2. **Rounds (Gavel §5, as the Sia artifact counts).** Priority of (j, t) = X[j, t] ÷ (j's time on t ÷ every job's
   time on t), 0 where X = 0; a job's time on a type is half a round from its first round plus the seconds it held
   GPUs there, and every job's time includes the jobs that have left. In decreasing priority (ties: larger X, then
   the type's name, then the job's submission), each job is admitted at most once, on the first type with its GPUs
   still free; entries with X = 0 come last and fill what is left, as in Gavel's scheduler. Then, per type, the
   largest jobs first: a job that held GPUs of that type keeps them where all are still free; the others take the
   first free GPUs in node order (`place_in_worker_order`).

A job whose step time is unknown on a type (the fitted fallback, before any fit) gets no time fraction there but may
still fill idle GPUs, after which it is measured. The policy remembers one thing between rounds: what the jobs that
have left had counted on each type (docs/design.md, "Gavel"); the rest comes from `JobView.run_time_by_type_s`. The
result does not depend on the order of the views.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from pollux.cluster import Allocation, Cluster
from pollux.policies.base import JobView, PolicyResult
from pollux.policies.placement import take
from pollux.policies.tuned_jobs import (
    TunedJobsPolicy,
    TypedStepTime,
    TypeFit,
    chosen_batches,
    current_type,
    fits_no_type,
    requested,
    step_rates,
    type_fits,
)

FRACTION_DECIMALS = 5  # the artifact rounds its time fractions so; equal fractions then compare equal


def max_sum_throughput(throughput: np.ndarray, gpus: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Time fractions X (jobs × types) maximizing Σ throughput · X (module docstring, 1); X = 0 wherever
    throughput ≤ 0; identical jobs share alike (`equal_shares`)."""
    num_jobs, num_types = throughput.shape
    size = num_jobs * num_types
    cols = np.arange(size)
    rows = np.concatenate([cols // num_types, num_jobs + cols % num_types])
    data = np.concatenate([np.ones(size), np.repeat(gpus.astype(np.float64), num_types)])
    constraints = sparse.csr_array((data, (rows, np.concatenate([cols, cols]))), shape=(num_jobs + num_types, size))
    limits = np.concatenate([np.ones(num_jobs), capacity.astype(np.float64)])
    flat = throughput.ravel()
    scale = max(float(flat.max(initial=0.0)), 1e-300)  # the same optimum, better conditioned
    bounds = np.column_stack([np.zeros(size), (flat > 0).astype(np.float64)])
    solution = linprog(-flat / scale, A_ub=constraints, b_ub=limits, bounds=bounds, method="highs")
    if not solution.success:  # X = 0 is feasible and X ≤ 1 bounded: HiGHS fails only on a bug
        raise RuntimeError(f"Gavel's linear program failed: {solution.message}")
    vertex = np.clip(solution.x, 0.0, 1.0).reshape(num_jobs, num_types)
    return np.round(equal_shares(vertex, throughput, gpus), FRACTION_DECIMALS)


def equal_shares(fractions: np.ndarray, throughput: np.ndarray, gpus: np.ndarray) -> np.ndarray:
    """Every group of identical jobs (the same throughput on every type, the same GPUs) given its mean fractions.

    Still an optimum (the mean of optima, by symmetry), and the one an interior-point solver converges to: the Sia
    artifact's Gavel solves with ECOS, which splits the time evenly among identical jobs where HiGHS' simplex vertex
    gives some all of it and the others none (docs/design.md, "Gavel")."""
    keys = np.column_stack([throughput, gpus.astype(np.float64)])
    _, group, counts = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
    group = group.reshape(-1)
    sums = np.zeros((len(counts), fractions.shape[1]))
    np.add.at(sums, group, fractions)
    return sums[group] / counts[group, None]


def priorities(fractions: np.ndarray, time_on_type: np.ndarray, type_time: np.ndarray) -> np.ndarray:
    """Gavel's round priorities (§5) as the Sia artifact counts the fraction received: X ÷ (the job's time on the
    type ÷ every job's time on it), 0 where X = 0. `time_on_type` (jobs × types) and `type_time` (types) are
    positive: every job is counted half a round on every type from its first round (docs/design.md, "Gavel")."""
    return np.where(fractions > 0, fractions * type_time / time_on_type, 0.0)


def place_in_worker_order(
    jobs: Mapping[str, JobView], chosen: Mapping[str, str], cluster: Cluster
) -> dict[str, Allocation]:
    """Where the chosen jobs (name → type, in the order they were admitted) run, as the artifact's Gavel places
    them: per type, the largest jobs first (ties: admission order); of each size, a job that held GPUs of that type
    last round keeps them where every one is still free, then the others take the first free GPUs in node order,
    across nodes where one does not hold them."""
    allocations: dict[str, Allocation] = {}
    free = list(cluster.node_gpus)
    for gpu_type in cluster.gpu_types:
        on_type = [name for name, t in chosen.items() if t == gpu_type]
        nodes = cluster.nodes_of_type(gpu_type)
        for size in sorted({requested(jobs[name]) for name in on_type}, reverse=True):
            group = [name for name in on_type if requested(jobs[name]) == size]
            for name in group:
                held = tuple(jobs[name].allocation)
                stays = current_type(jobs[name], cluster) == gpu_type
                if stays and all(g <= f for g, f in zip(held, free, strict=True)):
                    allocations[name] = held
                    take(free, held)
            for name in group:
                if name not in allocations:
                    allocations[name] = first_free(free, nodes, size)
                    take(free, allocations[name])
    return allocations


def first_free(free: Sequence[int], nodes: Sequence[int], num_gpus: int) -> Allocation:
    """`num_gpus` GPUs taken node by node, in the order of `nodes`, from the first with any free."""
    alloc = [0] * len(free)
    need = num_gpus
    for node in nodes:
        alloc[node] = min(free[node], need)
        need -= alloc[node]
    if need > 0:  # cannot happen: admission counted the type's free GPUs
        raise AssertionError(f"{num_gpus} GPUs asked of nodes {tuple(nodes)}, {sum(free[n] for n in nodes)} free")
    return tuple(alloc)


class GavelPolicy(TunedJobsPolicy):
    """Heterogeneity-aware time sharing of rigid jobs: an LP for each job's share of each GPU type, then rounds."""

    name: ClassVar[str] = "gavel"
    round_s: ClassVar[int | None] = 360  # Gavel's round length in the Sia paper's comparison

    def __init__(self, step_time: TypedStepTime | None = None) -> None:
        """`step_time`: the step time of a job on a type (default: its fitted models, `FittedStepTimeByType`)."""
        super().__init__(step_time)
        # Every job's time on each type as counted after the last round it was in (the artifact's job_time), for
        # jobs that leave the views (finished, or not admitted this round by the quota layer), and its sum.
        self._time_after: dict[str, dict[str, float]] = {}
        self._total_after: dict[str, float] = {}

    def optimize(self, jobs: Sequence[JobView], cluster: Cluster, now: float) -> PolicyResult:
        if not jobs:
            return PolicyResult({})
        ordered = sorted(jobs, key=lambda job: (job.submit_time_s, job.name))
        types = cluster.gpu_types
        fit = type_fits(ordered, cluster)
        gpus = np.array([requested(job) for job in ordered])
        rates = step_rates(ordered, fit, types, self._step_time)
        fractions = max_sum_throughput(rates, gpus, np.array([cluster.gpus_of_type(t) for t in types]))
        time_on_type = self._time_on_type(ordered, types)
        priority = priorities(fractions, time_on_type, self._type_time(ordered, types, time_on_type))
        chosen = self._admit(ordered, fit, fractions, priority, gpus, cluster)
        self._remember(ordered, types, time_on_type, chosen)
        return PolicyResult(
            allocations=place_in_worker_order({job.name: job for job in ordered}, chosen, cluster),
            reasons=self._reasons(ordered, fit, fractions, types, chosen),
            batch=chosen_batches(ordered, fit, types, chosen),
            info={
                key: {job.name: dict(zip(types, row, strict=True)) for job, row in zip(ordered, table, strict=True)}
                for key, table in (("time_fractions", fractions.tolist()), ("priorities", priority.tolist()))
            },
        )

    def _time_on_type(self, ordered: list[JobView], types: tuple[str, ...]) -> np.ndarray:
        """Each job's time on each type as the artifact counts it: half a round, plus the seconds it held GPUs of
        that type (jobs × types)."""
        half = float(self.round_s or 0) / 2
        return np.array([[half + job.run_time_by_type_s.get(t, 0.0) for t in types] for job in ordered])

    def _type_time(self, ordered: list[JobView], types: tuple[str, ...], time_on_type: np.ndarray) -> np.ndarray:
        """Every job's time on each type: the jobs in the views as they count now, the others as they last did."""
        absent = np.array([self._total_after.get(t, 0.0) for t in types])
        for job in ordered:
            counted = self._time_after.get(job.name, {})
            absent -= np.array([counted.get(t, 0.0) for t in types])
        return time_on_type.sum(axis=0) + absent

    def _remember(
        self, ordered: list[JobView], types: tuple[str, ...], time_on_type: np.ndarray, chosen: Mapping[str, str]
    ) -> None:
        """What each job will have counted after this round: a round more on the type it runs on."""
        for job, row in zip(ordered, time_on_type.tolist(), strict=True):
            after = dict(zip(types, row, strict=True))
            if job.name in chosen:
                after[chosen[job.name]] += float(self.round_s or 0)
            before = self._time_after.get(job.name, {})
            for t, seconds in after.items():
                self._total_after[t] = self._total_after.get(t, 0.0) + seconds - before.get(t, 0.0)
            self._time_after[job.name] = after

    @staticmethod
    def _admit(
        ordered: list[JobView],
        fit: list[list[TypeFit]],
        fractions: np.ndarray,
        priority: np.ndarray,
        gpus: np.ndarray,
        cluster: Cluster,
    ) -> dict[str, str]:
        """Which jobs run on which type, in the order admitted: (job, type) entries by priority, then X, then the
        type's name, then the job's place in `ordered` (the artifact's stable sort over its entries, type by type);
        each job once, while its GPUs fit in what is left of the type."""
        types = cluster.gpu_types
        job_index, type_index = np.nonzero(np.array([[f.fits for f in row] for row in fit], dtype=bool))
        by_name = np.argsort(np.argsort(np.array(types, dtype=object)))[type_index]
        keys = (job_index, by_name, -fractions[job_index, type_index], -priority[job_index, type_index])
        order = np.lexsort(keys)
        left = {t: cluster.gpus_of_type(t) for t in types}
        chosen: dict[str, str] = {}
        for j, k in zip(job_index[order].tolist(), type_index[order].tolist(), strict=True):
            name, t = ordered[j].name, types[k]
            if name not in chosen and gpus[j] <= left[t]:
                chosen[name] = t
                left[t] -= int(gpus[j])
        return chosen

    @staticmethod
    def _reasons(
        ordered: list[JobView],
        fit: list[list[TypeFit]],
        fractions: np.ndarray,
        types: tuple[str, ...],
        chosen: Mapping[str, str],
    ) -> dict[str, str]:
        reasons = {}
        for j, job in enumerate(ordered):
            if job.name in chosen:
                continue
            if not any(f.fits for f in fit[j]):
                reasons[job.name] = fits_no_type(fit[j])
            elif fractions[j].max() <= 0:
                reasons[job.name] = (
                    f"waiting: Gavel's fractions give it 0.00 on every type, and no type it fits had "
                    f"{requested(job)} GPUs left"
                )
            else:
                shares = ", ".join(f"{t} ({x:.2f})" for t, x in zip(types, fractions[j].tolist(), strict=True) if x > 0)
                reasons[job.name] = f"waiting: lower priority than the jobs placed on {shares}"
        return reasons
