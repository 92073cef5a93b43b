"""Fit the goodput model's throughput part to the measured profiles of real jobs, and score the fit.

Shared by `pollux demo`, `benchmarks/fit_profiles` and (later) the parametric job catalog, so the numbers they
print come from one piece of code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pollux.data.profiles import JobProfile
from pollux.goodput import ThroughputParams, ThroughputSamples, fit_throughput, rmsle


def profile_samples(profile: JobProfile) -> ThroughputSamples:
    """Every measured row (placements + scalability) as a throughput sample.

    A profile row has no accumulation; its compute time is the step time less the time spent synchronizing.
    """
    rows = (profile.placements, profile.scalability)
    column = lambda name: np.concatenate([getattr(r, name) for r in rows])  # noqa: E731
    step = column("step_time")
    return ThroughputSamples.from_arrays(
        num_nodes=column("num_nodes"),
        num_replicas=column("num_replicas"),
        local_bsz=column("local_bsz"),
        compute_time=np.maximum(step - column("sync_time"), 1e-6 * step),
        step_time=step,
    )


def subset(samples: ThroughputSamples, mask: np.ndarray) -> ThroughputSamples:
    """The samples where `mask` holds."""
    return ThroughputSamples(*(getattr(samples, f)[mask] for f in ThroughputSamples.__dataclass_fields__))


@dataclass(frozen=True)
class FitReport:
    """How well the throughput model describes one model's profile."""

    model: str
    num_samples: int
    params: ThroughputParams
    step_rmsle: float  # fitted on all rows, scored on all rows
    compute_rmsle: float
    multi_node_rmsle: float  # fitted on single-node rows only, scored on multi-node rows (extrapolation)


def fit_profile(profile: JobProfile) -> FitReport:
    """Fit on all rows, and separately on single-node rows to score extrapolation across nodes."""
    samples = profile_samples(profile)
    params = fit_throughput(samples)
    compute_err, step_err = rmsle(params, samples)
    single = samples.num_nodes == 1
    single_params = fit_throughput(subset(samples, single))
    _, extrapolation_err = rmsle(single_params, subset(samples, ~single))
    return FitReport(
        model=profile.model,
        num_samples=len(samples),
        params=params,
        step_rmsle=step_err,
        compute_rmsle=compute_err,
        multi_node_rmsle=extrapolation_err,
    )
