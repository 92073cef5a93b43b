"""Synthetic scheduling rounds of any size: jobs drawn from the six measured models at varied progress.

Shared by `benchmarks.sched_latency` and `benchmarks.search_quality`. Each job is one of the artifact's six
applications, uniformly, seen as the simulator's backend would show it to Pollux: its throughput model fitted to the
model's measured profile (`pollux.calibration.profile_samples`), its gradient statistics from the profile at a
random epoch, an exploration bound from how far it has scaled so far (docs/design.md, "Goodput model": 2 × the
most GPUs it ran on, at most 64 and max batch // min per-GPU batch; no model and no statistics before it has
run), a random age, restarts and attained service. ncf runs at its measured batch on one GPU, as the artifact runs it.

Current allocations are realistic rather than random: one Pollux round on the same jobs, a minute earlier, decides
them; then a tenth of the jobs leave and as many new ones arrive (no GPUs, no model yet).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np

from pollux.calibration import profile_samples
from pollux.cluster import Cluster
from pollux.goodput import ThroughputParams, fit_throughput
from pollux.policies.base import JobView
from pollux.policies.registry import make_policy
from pollux.sim.measured import MeasuredJobModel, load_measured_models

MAX_ELASTIC_GPUS = 64  # the artifact's simulator caps an elastic job at 64 GPUs
NCF_BATCH = 32768  # the artifact runs ncf at this batch on one GPU under elastic policies
EXPLORED = (0, 1, 2, 4, 8, 16, 32)  # most GPUs a job has run on so far ...
EXPLORED_P = (0.1, 0.2, 0.2, 0.2, 0.15, 0.1, 0.05)  # ... and how often
MAX_AGE_S = 8 * 3600.0
PARAM_JITTER = 0.1  # log-normal spread of each job's fitted α, β around the whole-profile fit
TURNOVER = 0.1  # share of jobs that left / arrived since the round that set the current allocations


@dataclass(frozen=True)
class Application:
    """What a synthetic job of one application is drawn from."""

    model: MeasuredJobModel
    params: ThroughputParams


@functools.cache
def applications() -> dict[str, Application]:
    """The six measured models with their throughput models fitted to the whole profile (about 5 ms each)."""
    return {
        name: Application(model, fit_throughput(profile_samples(model.profile)))
        for name, model in load_measured_models().items()
    }


def jittered(params: ThroughputParams, rng: np.random.Generator) -> ThroughputParams:
    """The α, β of `params` each scaled by a log-normal factor (γ kept): no two jobs share a model."""
    values = params.to_array()
    values[:6] *= np.exp(rng.normal(0.0, PARAM_JITTER, 6))
    return ThroughputParams.from_array(values)


def random_job(rng: np.random.Generator, name: str, now: float, cluster: Cluster, new: bool = False) -> JobView:
    """One job of a random application, at a random point of its training (`new`: just submitted), holding no
    GPUs."""
    apps = applications()
    app = apps[str(rng.choice(sorted(apps)))]
    model = app.model
    explored = 0 if new else int(rng.choice(EXPLORED, p=EXPLORED_P))
    age = float(rng.uniform(60.0, MAX_AGE_S)) if explored else float(rng.uniform(0.0, 60.0))
    bound = min(max(2 * explored, 1), MAX_ELASTIC_GPUS, model.max_batch_size // model.min_local_bsz)
    fixed = model.name == "ncf"
    epoch = int(rng.integers(0, model.max_epochs))
    return JobView(
        name=name,
        application=model.name,
        submit_time_s=now - age,
        allocation=cluster.empty(),
        num_restarts=int(rng.poisson(age / 3600.0)) if explored else 0,
        attained_service_gpu_s=float(age * rng.uniform(0.0, max(explored, 1))) if explored else 0.0,
        requested_gpus=int(rng.choice([1, 2, 4, 8])),
        max_gpus=1 if fixed else bound,
        init_batch_size=model.init_batch_size,
        max_batch_size=model.max_batch_size,
        local_bsz_bounds=(model.min_local_bsz, model.max_local_bsz),
        batch_size=NCF_BATCH if fixed else None,
        throughput_params=jittered(app.params, rng) if explored else None,
        grad_stats=model.grad_stats(model.init_batch_size, epoch) if explored else None,
    )


def synthetic_round(num_jobs: int, cluster: Cluster, rng: np.random.Generator, now: float = 36000.0) -> list[JobView]:
    """`num_jobs` active jobs at `now`, most of them holding the GPUs a Pollux round gave them a minute ago."""
    jobs = [random_job(rng, f"job-{i}", now, cluster) for i in range(num_jobs)]
    previous = make_policy("pollux").optimize(jobs, cluster, now - 60.0)
    jobs = [replace(job, allocation=previous.allocations.get(job.name, job.allocation)) for job in jobs]
    leaving = set(rng.choice(num_jobs, size=int(TURNOVER * num_jobs), replace=False).tolist())
    arrived = [random_job(rng, f"job-{num_jobs + i}", now, cluster, new=True) for i in range(len(leaving))]
    return [job for i, job in enumerate(jobs) if i not in leaving] + arrived
