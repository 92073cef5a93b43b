"""Optimus (Peng et al., EuroSys'18): size each job by how much one more GPU shortens its predicted remaining time.

Optimus adapts the GPU count, not the batch (§4.1): every job first gets one GPU (oldest first), then the GPUs left
go one at a time to the job whose remaining time, remaining steps × step time, would fall most, up to
batch // min_local_bsz GPUs. Remaining steps come from an oracle at the job's fixed batch (the Pollux artifact's
choice; Optimus itself fits a convergence curve, §3.1). Step time on K GPUs is predicted on K GPUs packed onto whole
nodes, from a `StepTimeModel`: by default the throughput model fitted on what the job ran (§3.2 fits a similar one);
the simulator may pass the measured profiles instead, which is what the artifact's Optimus reads. A job with no
fitted model yet is assumed to scale linearly. Placement follows the artifact: a job whose GPU count is unchanged
keeps its nodes; the others, smallest first, take GPUs from the nodes with most free GPUs.

On a cluster of several GPU types a job's GPUs are all of one type: its first GPU comes from the type it runs on
(while that type has GPUs left; else from the type it may use with most GPUs left), its extra GPUs only from that
type, and step times are predicted on that type's nodes. Otherwise the rule is the same, blind to types.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Sequence
from typing import ClassVar, Protocol

from pollux.cluster import Allocation, Cluster, free_gpus
from pollux.goodput import ThroughputParams, iteration_time
from pollux.policies.base import JobView, Policy, PolicyResult
from pollux.policies.placement import (
    allowed_types,
    fixed_batch_config,
    fixed_batches,
    in_submit_order,
    kept_allocations,
    of_type,
    packed_placement,
    place_most_free,
    take,
)


class StepTimeModel(Protocol):
    """Seconds per optimizer step of `job` on `placement` (GPUs per node) at per-GPU batch `local_bsz` with
    `accum_steps` accumulation steps; None when this model cannot predict the job (yet)."""

    def __call__(self, job: JobView, placement: tuple[int, ...], local_bsz: int, accum_steps: int) -> float | None:
        """Predicted step time in seconds, or None."""


class FittedStepTime:
    """`StepTimeModel` from the job's fitted `ThroughputParams` (Pollux §3.2's T_iter); None before any fit.

    Cached on (params, nodes, replicas, m, s): a round asks for about one prediction per GPU, and a job's params
    change only when it runs a configuration it had not run before."""

    def __init__(self, cache_size: int = 65536) -> None:
        self._cached = functools.lru_cache(maxsize=cache_size)(self._compute)

    def __call__(self, job: JobView, placement: tuple[int, ...], local_bsz: int, accum_steps: int) -> float | None:
        if job.throughput_params is None:
            return None
        return self._cached(job.throughput_params, len(placement), sum(placement), local_bsz, accum_steps)

    @staticmethod
    def _compute(params: ThroughputParams, num_nodes: int, num_replicas: int, local_bsz: int, accum: int) -> float:
        return float(iteration_time(params, num_nodes, num_replicas, local_bsz, accum))


class OptimusPolicy(Policy):
    """Greedy marginal gain in predicted remaining time, one GPU at a time, at each job's fixed batch."""

    name: ClassVar[str] = "optimus"
    inputs: ClassVar[tuple[str, ...]] = ("step_time",)  # the artifact's Optimus reads true step times

    def __init__(self, step_time: StepTimeModel | None = None) -> None:
        """`step_time`: how to predict a job's step time on a placement (default: its fitted throughput model)."""
        self._step_time: StepTimeModel = step_time if step_time is not None else FittedStepTime()

    @property
    def uses_throughput_model(self) -> bool:
        """Only the default step-time model reads `JobView.throughput_params`; with another (e.g. the simulator's
        measured profiles) backends need not refit them."""
        return isinstance(self._step_time, FittedStepTime)

    def optimize(self, jobs: Sequence[JobView], cluster: Cluster, now: float) -> PolicyResult:
        ordered = in_submit_order(jobs)
        left = {t: cluster.gpus_of_type(t) for t in cluster.gpu_types}
        gpus: dict[str, int] = {}
        types: dict[str, str] = {}
        for job in ordered:  # one GPU each, oldest first, while they last
            gpu_type = _first_gpu_type(job, cluster, left)
            gpus[job.name] = 0 if gpu_type is None else 1
            if gpu_type is not None:
                types[job.name] = gpu_type
                left[gpu_type] -= 1
        predict = _Predictor(self._step_time, ordered, cluster, types)
        gain = {job.name: predict.gain(job, 1) for job in ordered if gpus[job.name] > 0}
        while True:  # ties: the older job, as the artifact's dict order
            name = max((n for n in gain if left[types[n]] > 0), key=gain.__getitem__, default=None)
            if name is None or not gain[name] > 0:
                break
            gpus[name] += 1
            left[types[name]] -= 1
            gain[name] = predict.gain(predict.jobs[name], gpus[name])
        allocations = self._place(ordered, gpus, types, cluster)
        reasons = {
            job.name: (
                f"waiting: all {cluster.num_gpus} GPUs went to older jobs (each gets one before any gets two)"
                if allowed_types(cluster, job)
                else f"waiting: it may run on none of the cluster's GPU types ({', '.join(cluster.gpu_types)})"
            )
            for job in ordered
            if gpus[job.name] == 0
        }
        remaining_time = {
            job.name: predict.remaining_steps(job) * predict.step_time(job, gpus[job.name])
            for job in ordered
            if gpus[job.name] > 0
        }
        return PolicyResult(
            allocations=allocations,
            reasons=reasons,
            batch=fixed_batches(jobs, allocations, cluster),
            info={"predicted_remaining_s": remaining_time},
        )

    @staticmethod
    def _place(
        ordered: list[JobView], gpus: dict[str, int], types: dict[str, str], cluster: Cluster
    ) -> dict[str, Allocation]:
        """Unchanged GPU counts on an unchanged type keep their nodes; the rest, fewest GPUs first, go to the nodes
        of their type with most free."""
        same_type = [
            job for job in ordered if sum(job.allocation) == 0 or _type_of(job, cluster) == types.get(job.name)
        ]
        allocations = kept_allocations(same_type, cluster, gpus)
        free = free_gpus(cluster, allocations)
        for job in sorted(ordered, key=lambda j: gpus[j.name]):
            if gpus[job.name] > 0 and job.name not in allocations:
                masked = free if len(cluster.gpu_types) == 1 else of_type(cluster, free, types[job.name])
                alloc = place_most_free(masked, gpus[job.name])
                if alloc is None:  # cannot happen: at most as many GPUs of a type are handed out as it has
                    raise AssertionError(f"optimus handed out more GPUs than free for {job.name}")
                take(free, alloc)
                allocations[job.name] = alloc
        return allocations


def _type_of(job: JobView, cluster: Cluster) -> str | None:
    """The GPU type a job holds now (None: none, or an allocation that does not fit this cluster)."""
    if len(job.allocation) != cluster.num_nodes:
        return None
    return cluster.allocation_type(job.allocation)


def _first_gpu_type(job: JobView, cluster: Cluster, left: dict[str, int]) -> str | None:
    """The type a job's first GPU comes from: the one it holds now while that has GPUs left, else the type it may
    use with most GPUs left (ties: the cluster's order); None when none of them has any left."""
    current = _type_of(job, cluster)
    if current is not None and job.may_run_on(current) and left[current] > 0:
        return current
    open_types = [t for t in allowed_types(cluster, job) if left[t] > 0]
    return max(open_types, key=left.__getitem__, default=None)


class _Predictor:
    """One round's predictions: step time of each job on K packed GPUs, and the gain of its next GPU."""

    def __init__(self, model: StepTimeModel, ordered: list[JobView], cluster: Cluster, types: dict[str, str]) -> None:
        """`types`: the GPU type of each job that got GPUs; its GPUs and node sizes bound and shape its steps."""
        self._model = model
        self._sizes = {
            t: [g for g, u in zip(cluster.node_gpus, cluster.node_types, strict=True) if u == t]
            for t in cluster.gpu_types
        }
        self._gpus_of = {t: cluster.gpus_of_type(t) for t in cluster.gpu_types}
        self._types = types
        self._cluster_sizes = list(cluster.node_gpus)
        self._num_gpus = cluster.num_gpus
        self.jobs = {job.name: job for job in ordered}
        self._times: dict[tuple[str, int], float | None] = {}
        measured = [t for job in ordered if (t := self._measured(job, 1)) is not None]
        self._unmeasured_one_gpu_s = statistics.median(measured) if measured else 1.0

    def bound(self, job: JobView) -> int:
        """Most GPUs the job may hold: its own bound, batch // min_local_bsz, and its GPU type's GPUs."""
        gpu_type = self._types.get(job.name)
        top = self._num_gpus if gpu_type is None else self._gpus_of[gpu_type]
        return min(job.max_gpus, _fixed_batch(job) // job.local_bsz_bounds[0], top)

    def remaining_steps(self, job: JobView) -> float:
        """Oracle steps left at the fixed batch; 1 when unknown (the artifact's value for a job about to finish)."""
        return job.remaining_steps if job.remaining_steps is not None else 1.0

    def gain(self, job: JobView, gpus: int) -> float:
        """Seconds of remaining time saved by going from `gpus` to `gpus` + 1 GPUs (0 at the bound)."""
        if gpus + 1 > self.bound(job):
            return 0.0
        return (self.step_time(job, gpus) - self.step_time(job, gpus + 1)) * self.remaining_steps(job)

    def step_time(self, job: JobView, gpus: int) -> float:
        """Predicted seconds per step on `gpus` GPUs packed on its type's nodes; linear scaling from the median
        measured one-GPU step time while the job has no model (the artifact's `lambda n, r: r` speedup for
        unprofiled jobs)."""
        measured = self._measured(job, gpus)
        return measured if measured is not None else self._unmeasured_one_gpu_s / gpus

    def _measured(self, job: JobView, gpus: int) -> float | None:
        key = (job.name, gpus)
        if key not in self._times:
            # The artifact's Optimus predicts one-GPU step time with at least one accumulation step whatever the
            # batch (its simulated jobs only do so above M0); init_batch_size=0 reproduces that.
            local_bsz, accum_steps = fixed_batch_config(
                _fixed_batch(job), gpus, 0, job.max_batch_size, job.local_bsz_bounds
            )
            gpu_type = self._types.get(job.name)
            placement = packed_placement(gpus, self._cluster_sizes if gpu_type is None else self._sizes[gpu_type])
            self._times[key] = self._model(job, placement, local_bsz, accum_steps)
        return self._times[key]


def _fixed_batch(job: JobView) -> int:
    """The batch Optimus keeps: the workload's, or M0 for a job that did not fix one."""
    return job.batch_size if job.batch_size is not None else job.init_batch_size
