"""Rigid jobs at the workload's GPUs and batch ("TunedJobs", as the Sia paper ran its peers), on clusters of one or
several GPU types: how fast each job runs on each type, and where the jobs a peer chose go.

Shared by Gavel (`pollux.policies.gavel`), Themis (`pollux.policies.themis`) and Shockwave
(`pollux.policies.shockwave`), subclasses of `TunedJobsPolicy`, which differ in how they choose who runs on which type
(and Gavel also in where: the artifact's worker order):

- **A job on a type (`type_fit`).** Its requested GPUs packed on as few nodes of the type as possible, at the per-GPU
  split of `fixed_batch_config`: where that type's memory (`JobView.bounds_on`) cannot hold ⌈batch / GPUs⌉ examples
  per GPU, with gradient accumulation, as the job then runs (and as the Sia artifact's Gavel rates it). A job cannot
  run on a type it may not use or that has fewer GPUs than it requests.
- **Its speed there (`step_rates`).** Optimizer steps per second of the fixed batch on that placement: steps, not
  examples, as the Sia artifact's Gavel counts them. 0 where the job does not fit or its step time is unknown (the
  fitted fallback, before any fit).
- **Its progress (`steps_done_and_left`).** Steps done = seconds held on each type × its rate there; steps left the
  view's (the simulator's oracle), else as many as done (the job taken to be halfway).
- **Placement (`place_rigid`).** A chosen job still holding its GPUs on its chosen type keeps them exactly (no
  restart); the others, largest first, go best-fit onto one node of their type, or across its nodes with most free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from pollux.cluster import Allocation, Cluster, free_gpus
from pollux.goodput import BatchConfig, iteration_time
from pollux.policies.base import JobView, Policy
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


def requested(job: JobView) -> int:
    """The GPUs a rigid job runs on: its request, at least one."""
    return max(job.requested_gpus, 1)


def fixed_batch(job: JobView) -> int:
    """The total batch a rigid job trains with: its own, or M0 where the view declares none."""
    return job.batch_size if job.batch_size is not None else job.init_batch_size


def type_fit(job: JobView, cluster: Cluster, gpu_type: str) -> TypeFit:
    """Whether `job` can run on `gpu_type` at its requested GPUs and fixed batch, and how (module docstring)."""
    gpus = requested(job)
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


def type_fits(jobs: Sequence[JobView], cluster: Cluster) -> list[list[TypeFit]]:
    """`type_fit` of every job (rows) on every type of the cluster (columns, in the cluster's order)."""
    return [[type_fit(job, cluster, t) for t in cluster.gpu_types] for job in jobs]


def step_rates(
    jobs: Sequence[JobView], fit: Sequence[Sequence[TypeFit]], types: Sequence[str], step_time: TypedStepTime
) -> np.ndarray:
    """Steps per second of each job (rows) on each type it fits (columns; 0 elsewhere, and where the step time is
    unknown)."""
    rates = np.zeros((len(jobs), len(types)))
    for j, job in enumerate(jobs):
        for k, t in enumerate(types):
            config = fit[j][k].batch
            if config is None:
                continue
            step_s = step_time(job, fit[j][k].placement, config.local_bsz, config.accum_steps, gpu_type=t)
            if step_s is not None and math.isfinite(step_s) and step_s > 0:
                rates[j, k] = 1.0 / step_s
    return rates


def steps_done_and_left(job: JobView, rates: np.ndarray, types: Sequence[str]) -> tuple[float, float]:
    """Optimizer steps a rigid job has done and has left, from its row of `step_rates`: done = seconds held on each
    type (`run_time_by_type_s`; on a one-type cluster its GPU-seconds ÷ its GPUs) × its rate there; left = the
    view's `remaining_steps` where known, else as many as done (the runtime: the job is taken to be halfway)."""
    held_s = dict(job.run_time_by_type_s)
    if not held_s and len(types) == 1:
        held_s = {types[0]: job.attained_service_gpu_s / requested(job)}
    done = sum(seconds * rates[types.index(t)] for t, seconds in held_s.items() if t in types)
    return done, job.remaining_steps if job.remaining_steps is not None else done


def fits_no_type(fit_row: Sequence[TypeFit]) -> str:
    """Why a job that fits none of the cluster's types waits."""
    return "waiting: fits no GPU type (" + "; ".join(f.why_not for f in fit_row) + ")"


def chosen_batches(
    jobs: Sequence[JobView], fit: Sequence[Sequence[TypeFit]], types: Sequence[str], chosen: Mapping[str, str]
) -> dict[str, BatchConfig]:
    """The per-GPU batch and accumulation of every chosen job on its chosen type."""
    batch = {}
    for j, job in enumerate(jobs):
        if job.name in chosen:
            config = fit[j][types.index(chosen[job.name])].batch
            if config is not None:
                batch[job.name] = config
    return batch


def place_rigid(jobs: Sequence[JobView], chosen: Mapping[str, str], cluster: Cluster) -> dict[str, Allocation]:
    """Where the jobs in `chosen` (name → GPU type) run: kept where they are when they hold their GPUs on that
    type; the others, largest first (ties: name), best-fit on one node of their type, else across the nodes of that
    type with most free GPUs. The caller counted every chosen job's GPUs free on its type."""
    keep = {job.name: requested(job) for job in jobs if current_type(job, cluster) == chosen.get(job.name)}
    allocations = kept_allocations(jobs, cluster, keep)
    free = free_gpus(cluster, allocations)
    waiting = [job for job in jobs if job.name in chosen and job.name not in allocations]
    for job in sorted(waiting, key=lambda job: (-requested(job), job.name)):
        t = chosen[job.name]
        on_type = [f if cluster.node_types[n] == t else 0 for n, f in enumerate(free)]
        need = requested(job)
        largest = max(cluster.node_gpus[n] for n in cluster.nodes_of_type(t))
        alloc = place_consolidated(on_type, need, largest)
        if alloc is None:
            alloc = place_most_free(on_type, need)
        if alloc is None:  # cannot happen: the caller counted the type's free GPUs
            raise AssertionError(f"{job.name} was chosen for {t} beyond its free GPUs")
        take(free, alloc)
        allocations[job.name] = alloc
    return allocations


def current_type(job: JobView, cluster: Cluster) -> str | None:
    """The type of the GPUs the job holds now; None when it holds none (or its view does not match the cluster)."""
    alloc = job.allocation
    if len(alloc) != cluster.num_nodes or not any(g > 0 for g in alloc):
        return None
    types = {cluster.node_types[n] for n, g in enumerate(alloc) if g > 0}
    return next(iter(types)) if len(types) == 1 else None


class TunedJobsPolicy(Policy):
    """A peer that runs rigid jobs at the workload's GPUs and batch, timed by `step_time`: the simulator's true
    (profiled) step times, as the Sia paper's peers read them, else each job's fitted models."""

    inputs: ClassVar[tuple[str, ...]] = ("step_time",)
    elastic_gpus: ClassVar[bool] = False

    def __init__(self, step_time: TypedStepTime | None = None) -> None:
        self._step_time: TypedStepTime = step_time if step_time is not None else FittedStepTimeByType()

    @property
    def uses_throughput_model(self) -> bool:
        return isinstance(self._step_time, FittedStepTimeByType)
