"""Gavel (Narayanan et al., OSDI'20), policy `max_sum_throughput_perf`, with the workload's rigid jobs
("TunedJobs"), as the Sia paper (Jayaram Subramanya et al., SOSP'23) compared against it on clusters of several
GPU types (docs/design.md, "Gavel").

Every round (360 s, `round_s`), two steps:

1. **Time fractions (Gavel §3.1, §4.2).** X[j, t] = the fraction of time job j should run on type t, the solution of

       maximize Σ_j Σ_t throughput[j, t] · X[j, t]
       s.t.     Σ_t X[j, t] ≤ 1                                (a job runs on one type at a time)
                Σ_j requested_gpus[j] · X[j, t] ≤ GPUs of type t
                X ≥ 0, and X[j, t] = 0 where the job cannot run on t

   a linear program (HiGHS). Throughput = optimizer steps per second of the job's fixed batch on its requested GPUs
   of that type, packed on as few nodes as possible, at the per-GPU split of `fixed_batch_config`: where that type's
   memory (`JobView.bounds_on`) cannot hold ⌈batch / GPUs⌉ examples per GPU, with gradient accumulation, as the
   job then runs (and as the Sia artifact's Gavel rates it; steps, not examples, per second, as it does too).
   Gavel's code does not normalize this policy's throughputs (its `ThroughputSumWithPerf` computes a per-job scale
   and never uses it), and neither do we. A job cannot run on a type it may not use or that has fewer GPUs than it
   requests.
2. **Rounds (Gavel §5).** Priority of (j, t) = X[j, t] ÷ the fraction of its life j has run on t (∞ when it has not
   run there yet, 0 where X = 0). In decreasing priority (ties: larger X, then name), each job is admitted at most
   once, on the first type with its GPUs still free; entries with X = 0 come last and fill what is left, as in
   Gavel's scheduler. Then, per type, an admitted job still holding its GPUs of that type keeps them exactly (no
   restart); the others, largest first, go best-fit onto one node, or across the nodes with most free GPUs.

A job whose step time is unknown on a type (the fitted fallback, before any fit) gets no time fraction there but may
still fill idle GPUs, after which it is measured. The policy keeps no state: fractions received come from
`JobView.run_time_by_type_s` and the job's age; jobs are handled in name order, so the result does not depend on the
order of the views.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from pollux.cluster import Allocation, Cluster, free_gpus
from pollux.goodput import BatchConfig, iteration_time
from pollux.policies.base import JobView, Policy, PolicyResult
from pollux.policies.placement import fixed_batch_config, kept_allocations, place_consolidated, place_most_free, take


class TypedStepTime(Protocol):
    """Seconds per optimizer step of `job` on `placement` (GPUs per node) of nodes of `gpu_type` (None: the cluster's
    only type) at per-GPU batch `local_bsz` with `accum_steps` accumulation steps; None when it cannot say (yet)."""

    def __call__(
        self, job: JobView, placement: tuple[int, ...], local_bsz: int, accum_steps: int, gpu_type: str | None = None
    ) -> float | None:
        """Step time in seconds, or None."""


class FittedStepTimeByType:
    """`TypedStepTime` from the job's fitted throughput model of that type (Pollux §3.2's T_iter), or the model of
    the type it runs on where it has none for that type; None before any fit. What the runtime has."""

    def __call__(
        self, job: JobView, placement: tuple[int, ...], local_bsz: int, accum_steps: int, gpu_type: str | None = None
    ) -> float | None:
        params = job.throughput_params_by_type.get(gpu_type or "", job.throughput_params)
        if params is None:
            return None
        return float(iteration_time(params, len(placement), sum(placement), local_bsz, accum_steps))


@dataclass(frozen=True)
class TypeFit:
    """How a rigid job runs on one GPU type: its packed placement and batch split, or why it cannot run there."""

    placement: tuple[int, ...] = ()
    batch: BatchConfig | None = None
    why_not: str = ""

    @property
    def fits(self) -> bool:
        return self.batch is not None


def fixed_batch(job: JobView) -> int:
    """The total batch a rigid job trains with: its own, or M0 where the view declares none."""
    return job.batch_size if job.batch_size is not None else job.init_batch_size


def type_fit(job: JobView, cluster: Cluster, gpu_type: str) -> TypeFit:
    """Whether `job` can run on `gpu_type` at its requested GPUs and fixed batch, and how (module docstring, 1)."""
    gpus = max(job.requested_gpus, 1)
    if not job.may_run_on(gpu_type):
        return TypeFit(why_not=f"{gpu_type}: not one of its GPU types")
    if gpus > cluster.gpus_of_type(gpu_type):
        return TypeFit(why_not=f"{gpu_type}: {cluster.gpus_of_type(gpu_type)} GPUs, it needs {gpus}")
    batch, bounds = fixed_batch(job), job.bounds_on(gpu_type)
    local_bsz, accum_steps = fixed_batch_config(batch, gpus, job.init_batch_size, job.max_batch_size, bounds)
    sizes = sorted((cluster.node_gpus[n] for n in cluster.nodes_of_type(gpu_type)), reverse=True)
    placement: list[int] = []
    for size in sizes:
        if sum(placement) == gpus:
            break
        placement.append(min(size, gpus - sum(placement)))
    return TypeFit(tuple(placement), BatchConfig(local_bsz, accum_steps))


def max_sum_throughput(throughput: np.ndarray, gpus: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Time fractions X (jobs × types) maximizing Σ throughput · X (module docstring, 1); X = 0 wherever
    throughput ≤ 0. Rounded to 1e-6 so that equal fractions compare equal."""
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
    return np.round(np.clip(solution.x, 0.0, 1.0), 6).reshape(num_jobs, num_types)


def priorities(fractions: np.ndarray, received: np.ndarray) -> np.ndarray:
    """Gavel's round priorities (§5): allocated ÷ received fraction, ∞ where nothing was received, 0 where X = 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(received > 0, fractions / received, np.inf)
    return np.where(fractions > 0, ratio, 0.0)


class GavelPolicy(Policy):
    """Heterogeneity-aware time sharing of rigid jobs: an LP for each job's share of each GPU type, then rounds."""

    name: ClassVar[str] = "gavel"
    inputs: ClassVar[tuple[str, ...]] = ("step_time",)  # Sia's Gavel reads the true (profiled) step times
    elastic_gpus: ClassVar[bool] = False
    round_s: ClassVar[int | None] = 360  # Gavel's round length in the Sia paper's comparison

    def __init__(self, step_time: TypedStepTime | None = None) -> None:
        """`step_time`: the step time of a job on a type (default: its fitted models, `FittedStepTimeByType`)."""
        self._step_time: TypedStepTime = step_time if step_time is not None else FittedStepTimeByType()

    @property
    def uses_throughput_model(self) -> bool:
        return isinstance(self._step_time, FittedStepTimeByType)

    def optimize(self, jobs: Sequence[JobView], cluster: Cluster, now: float) -> PolicyResult:
        if not jobs:
            return PolicyResult({})
        ordered = sorted(jobs, key=lambda job: job.name)
        types = cluster.gpu_types
        fit = [[type_fit(job, cluster, t) for t in types] for job in ordered]
        gpus = np.array([max(job.requested_gpus, 1) for job in ordered])
        fractions = max_sum_throughput(
            self._throughputs(ordered, fit, types), gpus, np.array([cluster.gpus_of_type(t) for t in types])
        )
        received = np.array([[self._received(job, t, now) for t in types] for job in ordered])
        chosen = self._admit(ordered, fit, fractions, priorities(fractions, received), gpus, cluster)
        allocations = self._place(ordered, chosen, cluster)
        batch = {
            job.name: fit[j][types.index(chosen[job.name])].batch for j, job in enumerate(ordered) if job.name in chosen
        }
        return PolicyResult(
            allocations=allocations,
            reasons=self._reasons(ordered, fit, fractions, types, chosen),
            batch={name: config for name, config in batch.items() if config is not None},
            info={
                "time_fractions": {
                    job.name: dict(zip(types, row, strict=True))
                    for job, row in zip(ordered, fractions.tolist(), strict=True)
                }
            },
        )

    def _throughputs(self, ordered: list[JobView], fit: list[list[TypeFit]], types: tuple[str, ...]) -> np.ndarray:
        """Steps per second of each job on each type it fits (0 elsewhere, and where the step time is unknown)."""
        rates = np.zeros((len(ordered), len(types)))
        for j, job in enumerate(ordered):
            for k, t in enumerate(types):
                config = fit[j][k].batch
                if config is None:
                    continue
                step_s = self._step_time(job, fit[j][k].placement, config.local_bsz, config.accum_steps, gpu_type=t)
                if step_s is not None and math.isfinite(step_s) and step_s > 0:
                    rates[j, k] = 1.0 / step_s
        return rates

    @staticmethod
    def _received(job: JobView, gpu_type: str, now: float) -> float:
        """Fraction of its life so far the job has held GPUs of `gpu_type`."""
        age = job.age_s(now)
        return job.run_time_by_type_s.get(gpu_type, 0.0) / age if age > 0 else 0.0

    @staticmethod
    def _admit(
        ordered: list[JobView],
        fit: list[list[TypeFit]],
        fractions: np.ndarray,
        priority: np.ndarray,
        gpus: np.ndarray,
        cluster: Cluster,
    ) -> dict[str, str]:
        """Which jobs run on which type: (job, type) entries by priority, X, name; each job once, while its GPUs
        fit in what is left of the type."""
        types = cluster.gpu_types
        job_index, type_index = np.nonzero(np.array([[f.fits for f in row] for row in fit], dtype=bool))
        order = np.lexsort((type_index, job_index, -fractions[job_index, type_index], -priority[job_index, type_index]))
        left = {t: cluster.gpus_of_type(t) for t in types}
        chosen: dict[str, str] = {}
        for j, k in zip(job_index[order].tolist(), type_index[order].tolist(), strict=True):
            name, t = ordered[j].name, types[k]
            if name not in chosen and gpus[j] <= left[t]:
                chosen[name] = t
                left[t] -= int(gpus[j])
        return chosen

    @staticmethod
    def _place(ordered: list[JobView], chosen: Mapping[str, str], cluster: Cluster) -> dict[str, Allocation]:
        """Kept jobs where they are; the others, largest first, best-fit on one node of their type, else across
        the nodes of that type with most free GPUs."""
        keep = {
            job.name: max(job.requested_gpus, 1)
            for job in ordered
            if _current_type(job, cluster) == chosen.get(job.name)
        }
        allocations = kept_allocations(ordered, cluster, keep)
        free = free_gpus(cluster, allocations)
        waiting = [job for job in ordered if job.name in chosen and job.name not in allocations]
        for job in sorted(waiting, key=lambda job: (-max(job.requested_gpus, 1), job.name)):
            t = chosen[job.name]
            on_type = [f if cluster.node_types[n] == t else 0 for n, f in enumerate(free)]
            need = max(job.requested_gpus, 1)
            largest = max(cluster.node_gpus[n] for n in cluster.nodes_of_type(t))
            alloc = place_consolidated(on_type, need, largest)
            if alloc is None:
                alloc = place_most_free(on_type, need)
            if alloc is None:  # cannot happen: admission counted the type's free GPUs
                raise AssertionError(f"gavel admitted {job.name} to {t} beyond its free GPUs")
            take(free, alloc)
            allocations[job.name] = alloc
        return allocations

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
                reasons[job.name] = "waiting: fits no GPU type (" + "; ".join(f.why_not for f in fit[j]) + ")"
            elif fractions[j].max() <= 0:
                reasons[job.name] = (
                    f"waiting: Gavel's fractions give it 0.00 on every type, and no type it fits had "
                    f"{max(job.requested_gpus, 1)} GPUs left"
                )
            else:
                shares = ", ".join(f"{t} ({x:.2f})" for t, x in zip(types, fractions[j].tolist(), strict=True) if x > 0)
                reasons[job.name] = f"waiting: lower priority than the jobs placed on {shares}"
        return reasons


def _current_type(job: JobView, cluster: Cluster) -> str | None:
    """The type of the GPUs the job holds now; None when it holds none (or its view does not match the cluster)."""
    alloc = job.allocation
    if len(alloc) != cluster.num_nodes or not any(g > 0 for g in alloc):
        return None
    types = {cluster.node_types[n] for n, g in enumerate(alloc) if g > 0}
    return next(iter(types)) if len(types) == 1 else None
