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
   memory cannot hold ⌈batch / GPUs⌉ examples per GPU, with gradient accumulation, as the job then runs (and as the
   Sia artifact's Gavel rates it; steps, not examples, per second, as it does too: `pollux.policies.tuned_jobs`,
   shared with Themis). Gavel's code does not normalize this policy's throughputs (its `ThroughputSumWithPerf`
   computes a per-job scale and never uses it), and neither do we. A job cannot run on a type it may not use or that
   has fewer GPUs than it requests.
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

from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from pollux.cluster import Cluster
from pollux.policies.base import JobView, Policy, PolicyResult
from pollux.policies.tuned_jobs import (
    FittedStepTimeByType,
    TypedStepTime,
    TypeFit,
    chosen_batches,
    fits_no_type,
    place_rigid,
    requested,
    step_rates,
    type_fits,
)


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
        fit = type_fits(ordered, cluster)
        gpus = np.array([requested(job) for job in ordered])
        rates = step_rates(ordered, fit, types, self._step_time)
        fractions = max_sum_throughput(rates, gpus, np.array([cluster.gpus_of_type(t) for t in types]))
        received = np.array([[self._received(job, t, now) for t in types] for job in ordered])
        chosen = self._admit(ordered, fit, fractions, priorities(fractions, received), gpus, cluster)
        return PolicyResult(
            allocations=place_rigid(ordered, chosen, cluster),
            reasons=self._reasons(ordered, fit, fractions, types, chosen),
            batch=chosen_batches(ordered, fit, types, chosen),
            info={
                "time_fractions": {
                    job.name: dict(zip(types, row, strict=True))
                    for job, row in zip(ordered, fractions.tolist(), strict=True)
                }
            },
        )

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
