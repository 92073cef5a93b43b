"""Synthetic scheduling rounds of any size: jobs drawn from the six measured models at varied progress.

Shared by `benchmarks.sched_latency` and `benchmarks.search_quality`. Each job is one of the artifact's six
applications, uniformly, seen as the simulator's backend would show it to Pollux: its throughput model fitted to the
model's measured profile (`pollux.calibration.profile_samples`), its gradient statistics from the profile at a
random epoch, an exploration bound from how far it has scaled so far (docs/design.md, "Goodput model": 2 × the
most GPUs it ran on, at most 64 and max batch // min per-GPU batch; no model and no statistics before it has
run), a random age, restarts and attained service. ncf runs at its measured batch on one GPU, as the artifact runs it.

Current allocations are realistic rather than random: one Pollux round on the same jobs, a minute earlier, decides
them; then a tenth of the jobs leave and as many new ones arrive (no GPUs, no model yet).

`synthetic_typed_round` does the same on a cluster of several GPU types, with Sia's six models
(`load_typed_models("sia-sosp23")`) seen as `SimBackend._typed_view` shows them to a type-aware policy: a throughput
model fitted to each type's profile for every type the job has run on (a random subset of the cluster's types, none
for a new job), per-type batch bounds, 1-GPU throughput per type, run time per type and Sia's restore delay. A job
the earlier round placed on a type it had not run on has run there since (a minute, a model fitted there).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np

from pollux.calibration import profile_samples
from pollux.cluster import Cluster
from pollux.goodput import ThroughputParams, fit_throughput
from pollux.policies.base import JobView, exploration_bound
from pollux.policies.registry import make_policy
from pollux.sim.measured import MeasuredJobModel, load_measured_models
from pollux.sim.typed import Source, TypedJobModel, load_typed_models

MAX_ELASTIC_GPUS = 64  # the artifact's simulator caps an elastic job at 64 GPUs
NCF_BATCH = 32768  # the artifact runs ncf at this batch on one GPU under elastic policies
EXPLORED = (0, 1, 2, 4, 8, 16, 32)  # most GPUs a job has run on so far ...
EXPLORED_P = (0.1, 0.2, 0.2, 0.2, 0.15, 0.1, 0.05)  # ... and how often
MAX_AGE_S = 8 * 3600.0
PARAM_JITTER = 0.1  # log-normal spread of each job's fitted α, β around the whole-profile fit
TURNOVER = 0.1  # share of jobs that left / arrived since the round that set the current allocations
TYPES_RUN_P = (0.6, 0.3, 0.1)  # how often a job that has run did so on 1, 2, 3 ... of its usable types
TYPED_SOURCE: Source = "sia-sosp23"


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


# ---- clusters of several GPU types ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TypedApplication:
    """What a synthetic job of one application is drawn from on a cluster of several types: its per-type models,
    the types of the cluster it can run on, its throughput model fitted to each of those types' profile, and its
    1-GPU throughput on each (as `SimBackend._single_gpu_throughput` computes it)."""

    model: TypedJobModel
    usable: tuple[str, ...]
    params: dict[str, ThroughputParams]
    single_gpu_throughput: dict[str, float]


@functools.cache
def typed_applications(gpu_types: tuple[str, ...]) -> dict[str, TypedApplication]:
    """Sia's six models on the usable ones of `gpu_types`, each type's throughput model fitted to that type's whole
    profile (about 5 ms per model and type)."""
    apps = {}
    for name, typed in load_typed_models(TYPED_SOURCE).items():
        usable = tuple(t for t in gpu_types if t in typed.gpu_types)
        if not usable:
            continue
        models = [m for m in (typed.on(t) for t in usable) if isinstance(m, MeasuredJobModel)]
        assert len(models) == len(usable), "Sia's models are measured: each type has its profile"
        batch = max(min(models[0].init_batch_size, *(m.max_local_bsz for m in models)), 1)
        apps[name] = TypedApplication(
            typed,
            usable,
            {t: fit_throughput(profile_samples(m.profile)) for t, m in zip(usable, models, strict=True)},
            {t: batch / m.step_time((1,), batch)[0] for t, m in zip(usable, models, strict=True)},
        )
    return apps


def random_typed_job(rng: np.random.Generator, name: str, now: float, cluster: Cluster, new: bool = False) -> JobView:
    """One job of a random Sia application on a cluster of several types, at a random point of its training (`new`:
    just submitted), holding no GPUs: it has run on a random subset of the types it may use, last on one of them."""
    apps = typed_applications(cluster.gpu_types)
    app = apps[str(rng.choice(sorted(apps)))]
    typed = app.model
    explored = 0 if new else int(rng.choice(EXPLORED, p=EXPLORED_P))
    age = float(rng.uniform(60.0, MAX_AGE_S)) if explored else float(rng.uniform(0.0, 60.0))
    if explored:
        probs = np.array(TYPES_RUN_P[: len(app.usable)])
        count = int(rng.choice(np.arange(1, probs.size + 1), p=probs / probs.sum()))
        ran = [str(t) for t in rng.choice(app.usable, size=count, replace=False)]
    else:
        ran = []
    current = ran[0] if ran else app.usable[0]  # the type it runs on last, or the first it may use (the backend's)
    model = typed.on(current)
    fixed = typed.name == "ncf"
    bound = exploration_bound(explored, model.max_batch_size, model.min_local_bsz)
    epoch = int(rng.integers(0, model.max_epochs))
    params = {t: jittered(app.params[t], rng) for t in ran}
    shares = rng.dirichlet(np.ones(len(ran))) if ran else np.zeros(0)
    return JobView(
        name=name,
        application=typed.name,
        submit_time_s=now - age,
        allocation=cluster.empty(),
        num_restarts=int(rng.poisson(age / 3600.0)) if explored else 0,
        attained_service_gpu_s=float(age * rng.uniform(0.0, max(explored, 1))) if explored else 0.0,
        requested_gpus=int(rng.choice([1, 2, 4, 8])),
        max_gpus=1 if fixed else bound,
        init_batch_size=typed.init_batch_size,
        max_batch_size=typed.max_batch_size,
        local_bsz_bounds=(model.min_local_bsz, model.max_local_bsz),
        batch_size=NCF_BATCH if fixed else None,
        throughput_params=params.get(current),
        grad_stats=model.grad_stats(typed.init_batch_size, epoch) if explored else None,
        gpu_types=app.usable,
        throughput_params_by_type=params,
        local_bsz_bounds_by_type={t: typed.local_bsz_bounds_by_type[t] for t in app.usable},
        run_time_by_type_s={t: float(age * share) for t, share in zip(ran, shares, strict=True)},
        single_gpu_throughput_by_type=app.single_gpu_throughput,
        restart_delay_s=typed.restore_delay_s,
    )


def ran_a_minute(job: JobView, allocation: tuple[int, ...], cluster: Cluster, rng: np.random.Generator) -> JobView:
    """The job after a minute on `allocation`: on the type of its nodes, with a model fitted there."""
    gpu_type = cluster.allocation_type(allocation)
    if gpu_type is None:
        return job
    app = typed_applications(cluster.gpu_types)[job.application]
    params = dict(job.throughput_params_by_type)
    if gpu_type not in params:
        params[gpu_type] = jittered(app.params[gpu_type], rng)
    run_time = dict(job.run_time_by_type_s)
    run_time[gpu_type] = run_time.get(gpu_type, 0.0) + 60.0
    model = app.model.on(gpu_type)
    return replace(
        job,
        allocation=allocation,
        throughput_params=params[gpu_type],
        throughput_params_by_type=params,
        run_time_by_type_s=run_time,
        local_bsz_bounds=(model.min_local_bsz, model.max_local_bsz),
        grad_stats=job.grad_stats or model.grad_stats(model.init_batch_size, 0),
    )


def synthetic_typed_round(
    num_jobs: int, cluster: Cluster, rng: np.random.Generator, now: float = 36000.0
) -> list[JobView]:
    """`synthetic_round` on a cluster of several GPU types, with Sia's models (module docstring)."""
    jobs = [random_typed_job(rng, f"job-{i}", now, cluster) for i in range(num_jobs)]
    previous = make_policy("pollux").optimize(jobs, cluster, now - 60.0)
    jobs = [ran_a_minute(job, previous.allocations.get(job.name, job.allocation), cluster, rng) for job in jobs]
    leaving = set(rng.choice(num_jobs, size=int(TURNOVER * num_jobs), replace=False).tolist())
    arrived = [random_typed_job(rng, f"job-{num_jobs + i}", now, cluster, new=True) for i in range(len(leaving))]
    return [job for i, job in enumerate(jobs) if i not in leaving] + arrived
