"""The simulator's backend: virtual progress of jobs from their job models, on a virtual clock.

Each `SimJob` follows the artifact's job model (docs/design.md, "Simulated jobs"): progress in M0-steps, `gain` per
step from the true gradient statistics, epochs by progress, a restart delay after every allocation change, and an
agent that learns its throughput model only from the placements it has itself run (a trial of an experiment: and from
those its experiment's trials ran before it arrived).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields

from pollux.autoscale import moved_allocation
from pollux.cluster import Allocation, Cluster, num_nodes_used, placement
from pollux.defaults import RESTART_DELAY_S
from pollux.engine import Decision
from pollux.errors import SpecError
from pollux.goodput import (
    BatchConfig,
    BatchLimits,
    GradientStats,
    ThroughputLog,
    ThroughputParams,
    adascale_gain,
    decide_batch,
    fit_throughput,
)
from pollux.policies.base import JobView
from pollux.policies.facts import JobFacts, gpu_bound, job_view
from pollux.policies.placement import fixed_batch_config
from pollux.sim.experiments import TrialArrivals
from pollux.sim.jobmodel import JobModel, accumulated_step_time
from pollux.sim.typed import TypedJobModel
from pollux.tenants import DEFAULT_TENANT

POOLED = "*"  # the samples key of a job that learns one model from every GPU type (type-unaware policies)

PLACEMENT_SENSITIVITY = 1.2  # spread/packed step-time ratio above which a model counts as placement-sensitive

# Throughput models fitted so far, by the exact samples they were fitted to: a fit is a pure function of its samples,
# and simulated jobs of one model running the same configurations log the same samples (a profile's times do not
# vary), so they share one fit instead of repeating it (Sia's scale workloads issue every job up to 32 times).
FitCache = dict[bytes, ThroughputParams]


@dataclass(frozen=True)
class SimJobSpec:
    """A workload row as the simulator runs it."""

    name: str
    application: str
    submit_time_s: float
    requested_gpus: int
    batch_size: int | None  # fixed total batch; None: the job (or, with batch_by_policy, the policy) picks it
    max_gpus: int | None = None  # extra cap (the artifact runs ncf on one GPU under elastic policies)
    batch_by_policy: bool = False  # the policy sends each job's batch with its allocation (elastic-DP)
    tenant: str = DEFAULT_TENANT  # the team it belongs to (`pollux.tenants`)
    experiment: str | None = None  # the experiment it is a trial of (`pollux.sim.experiments`)


@dataclass
class SimJob:
    """Mutable state of one simulated job (the backend owns it; policies see only `JobView`s).

    On a cluster of several GPU types the job runs on one type at a time (`gpu_type`, the last it ran on while it
    waits) with that type's job model, and learns one throughput model per type from what it ran there; with
    `type_aware` off it pools every type's samples into one model, as a heterogeneity-unaware agent would."""

    spec: SimJobSpec
    typed: TypedJobModel
    fit_throughput_model: bool = True
    type_aware: bool = True
    gpu_type: str = ""  # the type it runs on, or last ran on; before any run, the first type it may use
    allocation: Allocation = ()
    local_bsz: int = 0
    accum_steps: int = 0
    progress: float = 0.0
    epoch: int = 0
    restart_left_s: float = 0.0
    attained_gpu_s: float = 0.0
    num_restarts: int | None = None  # None until the first start
    start_time_s: float | None = None
    allocated_at_s: float | None = None  # when its current allocation began (its last restart)
    completion_time_s: float | None = None
    running_s: float = 0.0
    gpu_s_by_type: dict[str, float] = field(default_factory=dict)  # GPU-seconds held on each type
    run_s_by_type: dict[str, float] = field(default_factory=dict)  # seconds held GPUs of each type
    samples: dict[str, ThroughputLog] = field(default_factory=dict)  # what it ran, per GPU type (or POOLED)
    params_by_type: dict[str, ThroughputParams] = field(default_factory=dict)
    grad_stats: GradientStats | None = None
    policy_batch: BatchConfig | None = None  # the batch the policy chose, where it chooses
    fits: FitCache = field(default_factory=dict, repr=False)  # shared by the backend's jobs
    _gains: list[float] = field(default_factory=list, repr=False)  # gain per epoch at the fixed batch
    _steps_after: list[float] | None = field(default=None, repr=False)  # steps for epochs e.. at the fixed batch

    def __post_init__(self) -> None:
        self.gpu_type = self.gpu_type or self.typed.gpu_types[0]

    @property
    def model(self) -> JobModel:
        """The job model of the type it runs on (or last ran on)."""
        return self.typed.on(self.gpu_type)

    @property
    def _samples_key(self) -> str:
        return self.gpu_type if self.type_aware else POOLED

    @property
    def params(self) -> ThroughputParams | None:
        """Its throughput model of the type it runs on (of every type, when it does not tell types apart)."""
        return self.params_by_type.get(self._samples_key)

    @property
    def num_gpus(self) -> int:
        return sum(self.allocation)

    @property
    def replicas(self) -> int:
        """Its data-parallel replicas: its GPUs, or for a pipeline-parallel model its GPUs over the k of one
        replica on its type (`pollux.sim.pipeline`): what scales its batch."""
        return self.num_gpus // self.typed.gpus_per_replica(self.gpu_type)

    @property
    def done(self) -> bool:
        return self.completion_time_s is not None

    def batch_size(self) -> int:
        return self.replicas * self.local_bsz * (self.accum_steps + 1)

    def max_replicas_run(self) -> int:
        """The most GPUs it has run on, on any type (what it has measured of its scaling)."""
        return max((log.max_replicas for log in self.samples.values()), default=0)

    def max_gpus(self, gpu_type: str | None = None) -> int:
        """The most GPUs it may be given on `gpu_type` (None: the type it has; `pollux.policies.facts.gpu_bound`,
        the runtime's rule too, in replicas, times the GPUs of one replica there)."""
        gpu_type = gpu_type or self.gpu_type
        model = self.typed.on(gpu_type)
        return self.typed.gpus_per_replica(gpu_type) * gpu_bound(
            self.spec.batch_size,
            self.spec.batch_by_policy,
            self.max_replicas_run(),
            model.max_batch_size,
            model.min_local_bsz,
            self.spec.max_gpus or None,
        )

    def batch_limits(self) -> BatchLimits:
        """The bounds the job's agent decides its batch within: accumulation allowed, as in the artifact, save for a
        pipeline-parallel model, whose replica's batch is its micro-batches (Sia's, fixed)."""
        model = self.model
        bounds = (model.min_local_bsz, model.max_local_bsz)
        return BatchLimits(model.init_batch_size, model.max_batch_size, bounds, accumulation=not self.typed.pipelined)

    # -- batch choice (what the agent does) -------------------------------------------------------------------
    def choose_batch(self) -> None:
        """Pick (local_bsz, accum_steps) for the current allocation: the policy's, the fixed batch spread over the
        GPUs, or the agent's own decision (`decide_batch`, the code a real job's agent runs) from the job's fitted
        model and gradient statistics."""
        model, gpus = self.model, self.replicas
        if gpus == 0:
            self.local_bsz = self.accum_steps = 0
            return
        if self.policy_batch is not None:
            local, accum = self.policy_batch.local_bsz, self.policy_batch.accum_steps
        elif self.spec.batch_size is not None:
            bounds = (model.min_local_bsz, model.max_local_bsz)
            local, accum = fixed_batch_config(
                self.spec.batch_size, gpus, model.init_batch_size, model.max_batch_size, bounds
            )
        else:  # the job's agent decides (an elastic-DP job, before its policy's first batch: the initial split)
            params = None if self.spec.batch_by_policy else self.params
            nodes = num_nodes_used(self.allocation)
            config = decide_batch(self.batch_limits(), params, self.grad_stats, nodes, gpus).config
            self.local_bsz, self.accum_steps = config.local_bsz, config.accum_steps
            return
        self.local_bsz = max(min(local, model.max_batch_size // (gpus * (accum + 1))), 1)
        self.accum_steps = accum

    def record_sample(self, nodes: int, gpus: int, step_s: float, sync_s: float) -> None:
        """Log a configuration the job ran in its `ThroughputLog` (the agent's), and refit its throughput model (of
        this type) when the configuration is new. A profile's times do not vary, so the first is all there is.

        Every refit starts afresh, as the artifact's agents do, so the job's model of its own scaling depends on what
        it ran, not on the order it happened to explore in; so it is the fit of the same samples logged by any other
        job of the backend, fitted once (`FitCache`)."""
        key = (nodes, gpus, self.local_bsz, 0)  # the profile's times are of one micro-batch step
        log = self.samples.setdefault(self._samples_key, ThroughputLog())
        if key in log or not self.fit_throughput_model:
            return
        log.record(*key, compute_s=max(step_s - sync_s, 1e-6 * step_s), step_s=step_s)
        self._refit(self._samples_key)

    def start_from(self, trials: Sequence[SimJob]) -> None:
        """Take what the other trials of its experiment measured of their throughput as its own, before its first
        step (docs/design.md, "Experiments"): they train the same model on the same GPUs, so the configurations they
        logged are this trial's too, with the throughput model fitted to them, and the exploration bound grows from
        the most GPUs any of them ran on. Not their gradient statistics: those depend on a trial's hyper-parameters
        (its batch size, its learning rate), which differ from trial to trial."""
        if not self.fit_throughput_model:
            return
        learned = set()
        for trial in (trial for trial in trials if trial is not self):
            for key, theirs in trial.samples.items():
                samples = theirs.samples()
                if samples is None:
                    continue
                log = self.samples.setdefault(key, ThroughputLog())
                columns = (samples.num_nodes, samples.num_replicas, samples.local_bsz, samples.accum_steps)
                times = (samples.compute_time, samples.step_time)
                rows = zip(*(column.tolist() for column in columns + times), strict=True)
                for nodes, gpus, local_bsz, accum_steps, compute_s, step_s in rows:
                    if (nodes, gpus, local_bsz, accum_steps) not in log:
                        log.record(nodes, gpus, local_bsz, accum_steps, compute_s=compute_s, step_s=step_s)
                        learned.add(key)
        for key in sorted(learned):
            self._refit(key)

    def _refit(self, key: str) -> None:
        """Fit its throughput model of samples key `key` (a GPU type, or POOLED) to what it logged there afresh."""
        samples = self.samples[key].samples()
        assert samples is not None
        content = b"".join(getattr(samples, column.name).tobytes() for column in fields(samples))
        if content not in self.fits:
            self.fits[content] = fit_throughput(samples)
        self.params_by_type[key] = self.fits[content]

    # -- progress ------------------------------------------------------------------------------------------
    def advance(self, now: float, seconds: float, slowdown: float = 0.0) -> None:
        """Run for `seconds` of virtual time starting at `now` (the artifact's step, in integer seconds)."""
        if not self.allocation or self.done:
            return
        delay = min(self.restart_left_s, seconds)
        self.restart_left_s -= delay
        self._hold(delay)
        now += delay
        seconds -= delay
        model = self.model
        calibration = self.typed.progress_slowdown  # Sia: its physical runs were this much slower
        place = placement(self.allocation)
        nodes, gpus = len(place), self.replicas
        while seconds > 0 and not self.done:
            batch = gpus * self.local_bsz * (self.accum_steps + 1)
            step_s, sync_s = model.step_time(place, self.local_bsz)
            stats = model.grad_stats(batch, self.epoch)
            self.grad_stats = stats
            self.record_sample(nodes, gpus, step_s, sync_s)
            gain = adascale_gain(stats, model.init_batch_size, batch)
            step = accumulated_step_time(step_s, sync_s, self.accum_steps)
            rate = gain / step * (1.0 - slowdown) / calibration  # M0-steps/s
            next_progress = model.epoch_progress(self.epoch + 1)
            if self.progress + rate * seconds < next_progress:
                self.progress += rate * seconds
                used = seconds
            else:
                used = round((next_progress - self.progress) / rate)
                self.progress = next_progress
                self.epoch += 1
                if self.epoch >= model.max_epochs:
                    self.completion_time_s = now + used
            self._hold(used)
            now += used
            seconds -= used
            self.choose_batch()

    def _hold(self, seconds: float) -> None:
        """Count `seconds` of holding its GPUs (running or restoring)."""
        gpus, gpu_type = self.num_gpus, self.gpu_type
        self.attained_gpu_s += seconds * gpus
        self.running_s += seconds
        self.gpu_s_by_type[gpu_type] = self.gpu_s_by_type.get(gpu_type, 0.0) + seconds * gpus
        self.run_s_by_type[gpu_type] = self.run_s_by_type.get(gpu_type, 0.0) + seconds

    def reallocate(
        self,
        allocation: Allocation,
        now: float,
        restart_delay_s: float,
        batch: BatchConfig | None = None,
        gpu_type: str | None = None,
    ) -> None:
        """Move the job to `allocation` (all zeros: preempt) on nodes of `gpu_type` (None: the type it has), with
        the policy's batch where it picks one. Every start or move costs a restart delay (the model's own
        checkpoint-restore delay where it has one)."""
        self.policy_batch = batch
        if sum(allocation) == 0:
            self.allocation = ()
            self.local_bsz = self.accum_steps = 0
            self.allocated_at_s = None
            return
        self.allocation = tuple(allocation)
        self.allocated_at_s = now
        self.gpu_type = gpu_type or self.gpu_type
        delay = self.typed.restore_delay_s
        self.restart_left_s = restart_delay_s if delay is None else delay
        self.num_restarts = 0 if self.num_restarts is None else self.num_restarts + 1
        if self.start_time_s is None:
            self.start_time_s = now
        self.choose_batch()

    def move(self, allocation: Allocation, batch: BatchConfig | None = None) -> None:
        """Take other GPUs of the same shape and type without a restart (a model whose moves do not restart it)."""
        self.allocation = tuple(allocation)
        self.policy_batch = batch
        self.choose_batch()

    def epochs_done(self) -> float:
        """Epochs trained, the current one's share included: what its agent would report (`Progress`)."""
        model = self.model
        if self.epoch >= model.max_epochs:
            return float(model.max_epochs)
        start, end = model.epoch_progress(self.epoch), model.epoch_progress(self.epoch + 1)
        return self.epoch + (self.progress - start) / (end - start) if end > start else float(self.epoch)

    def remaining_steps(self) -> float | None:
        """Oracle: optimizer steps left at the fixed batch (Optimus' remaining-iterations estimate)."""
        if self.spec.batch_size is None or self.done:
            return None
        model = self.model
        if self._steps_after is None:
            batch = self.spec.batch_size
            self._gains = [
                adascale_gain(model.grad_stats(batch, epoch), model.init_batch_size, batch)
                for epoch in range(model.max_epochs)
            ]
            self._steps_after = [0.0] * (model.max_epochs + 1)
            for epoch in reversed(range(model.max_epochs)):
                length = model.epoch_progress(epoch + 1) - model.epoch_progress(epoch)
                self._steps_after[epoch] = self._steps_after[epoch + 1] + length / self._gains[epoch]
        left_in_epoch = model.epoch_progress(self.epoch + 1) - self.progress
        return left_in_epoch / self._gains[self.epoch] + self._steps_after[self.epoch + 1]


def placement_sensitive(model: JobModel) -> bool:
    """Whether spreading 4 GPUs over 4 nodes slows the model markedly against packing them on one node."""
    local = model.min_local_bsz
    packed, _ = model.step_time((4,), local)
    spread, _ = model.step_time((1, 1, 1, 1), local)
    return spread > PLACEMENT_SENSITIVITY * packed


def typed_models(models: Mapping[str, JobModel | TypedJobModel], cluster: Cluster) -> dict[str, TypedJobModel]:
    """Every application's models per GPU type; a model without types serves every type of the cluster alike."""
    typed = {}
    for name, model in models.items():
        if isinstance(model, TypedJobModel):
            typed[name] = model
        else:
            typed[name] = TypedJobModel(name, {t: model for t in cluster.gpu_types})
    return typed


class SimBackend:
    """Virtual-clock backend: holds every job of a workload and advances them between rounds.

    `type_aware` off: jobs learn one throughput model from every GPU type they run on, and policies see the batch
    bounds of the cluster's first type (the Sia paper's heterogeneity-unaware Pollux)."""

    def __init__(
        self,
        cluster: Cluster,
        jobs: Sequence[SimJobSpec],
        models: Mapping[str, JobModel | TypedJobModel],
        restart_delay_s: float = float(RESTART_DELAY_S),
        interference: float = 0.0,
        fit_throughput_model: bool = True,
        type_aware: bool = True,
    ) -> None:
        self._cluster = cluster
        self.restart_delay_s = restart_delay_s
        self.interference = interference
        self.type_aware = type_aware
        self.models = typed_models(models, cluster)
        used = dict.fromkeys(spec.application for spec in jobs)  # models no job runs need not fit the cluster
        self._usable = {name: self._usable_types(self.models[name]) for name in used}
        fits: FitCache = {}
        self.jobs = [
            SimJob(
                spec,
                self.models[spec.application],
                fit_throughput_model,
                type_aware,
                gpu_type=self._usable[spec.application][0],
                fits=fits,
            )
            for spec in jobs
        ]
        self._sensitive = {
            name: not self.models[name].pipelined and placement_sensitive(self.models[name].on(usable[0]))
            for name, usable in self._usable.items()
        }
        self._speeds = {name: self._single_gpu_throughput(name) for name in self._usable}
        self._by_name = {job.spec.name: job for job in self.jobs}
        self._arrivals = TrialArrivals(self.jobs)

    def _usable_types(self, model: TypedJobModel) -> tuple[str, ...]:
        """The cluster's types `model` has a job model for, where one replica fits a node."""
        cluster = self._cluster
        usable = tuple(
            t
            for t in cluster.gpu_types
            if t in model.gpu_types
            and model.gpus_per_replica(t) <= max(cluster.node_gpus[n] for n in cluster.nodes_of_type(t))
        )
        if not usable:
            raise SpecError(
                f"application {model.name!r} has job models for GPU types {', '.join(model.gpu_types)}, none of which "
                f"the cluster ({cluster.describe()}) has with a node that holds one of its replicas; use a cluster "
                "with one of them"
            )
        return usable

    def _single_gpu_throughput(self, name: str) -> dict[str, float]:
        """Examples per second on one GPU of each usable type, at one per-GPU batch that fits them all (the cheap
        profile whose ratios bootstrap a type's model, docs/design.md "Heterogeneous clusters"); for a
        pipeline-parallel model, of one replica (its k GPUs) at its batch: its model counts replicas."""
        typed, usable = self.models[name], self._usable[name]
        models = [typed.on(t) for t in usable]
        if typed.pipelined:
            return {
                t: m.min_local_bsz / m.step_time((typed.gpus_per_replica(t),), m.min_local_bsz)[0]
                for t, m in zip(usable, models, strict=True)
            }
        batch = max(min(models[0].init_batch_size, *(m.max_local_bsz for m in models)), 1)
        return {t: batch / m.step_time((1,), batch)[0] for t, m in zip(usable, models, strict=True)}

    @property
    def cluster(self) -> Cluster:
        return self._cluster

    def all_done(self) -> bool:
        return all(job.done for job in self.jobs)

    def advance(self, now: float, seconds: float) -> None:
        """Advance every running job from `now` by `seconds`, slowing distributed jobs that share a node; then submit
        the trials whose slots the finished trials freed."""
        slowed = self._interfering_jobs() if self.interference > 0 else set()
        for job in self.jobs:
            job.advance(now, seconds, self.interference if job.spec.name in slowed else 0.0)
        self._arrivals()

    def _interfering_jobs(self) -> set[str]:
        """Distributed jobs on a node that hosts another distributed job."""
        per_node: dict[int, list[str]] = {}
        for job in self.jobs:
            if job.allocation and num_nodes_used(job.allocation) > 1:
                for node, gpus in enumerate(job.allocation):
                    if gpus:
                        per_node.setdefault(node, []).append(job.spec.name)
        return {name for names in per_node.values() if len(names) > 1 for name in names}

    def active(self, now: float) -> list[SimJob]:
        return [job for job in self.jobs if job.spec.submit_time_s <= now and not job.done]

    def job_views(self, now: float) -> list[JobView]:
        return [job_view(self._facts(job)) for job in self.active(now)]

    def _facts(self, job: SimJob) -> JobFacts:
        """What a policy may know of a simulated job. On a cluster of several GPU types: where it may run and how
        long it ran on each; and, for a policy that tells types apart, its model and memory bounds per type and its
        1-GPU throughput per type. A type-unaware policy sees the bounds of the job's first usable type."""
        usable = self._usable[job.spec.application]
        model = job.model if self.type_aware else job.typed.on(usable[0])
        typed = self._cluster.heterogeneous
        per_type = typed and self.type_aware
        return JobFacts(
            name=job.spec.name,
            application=job.spec.application,
            submit_time_s=job.spec.submit_time_s,
            allocation=job.allocation or self._cluster.empty(),
            num_restarts=job.num_restarts or 0,
            attained_service_gpu_s=job.attained_gpu_s,
            requested_gpus=job.spec.requested_gpus,
            init_batch_size=model.init_batch_size,
            max_batch_size=model.max_batch_size,
            local_bsz_bounds=(model.min_local_bsz, model.max_local_bsz),
            batch_size=job.spec.batch_size,
            batch_by_policy=job.spec.batch_by_policy,
            max_replicas_run=job.max_replicas_run(),
            gpu_cap=job.spec.max_gpus or None,
            throughput_params=job.params,
            grad_stats=job.grad_stats,
            remaining_steps=job.remaining_steps(),
            placement_sensitive=self._sensitive[job.spec.application],
            gpu_types=usable if typed else None,
            throughput_params_by_type=dict(job.params_by_type) if per_type else {},
            local_bsz_bounds_by_type=(
                {t: (job.typed.on(t).min_local_bsz, job.typed.on(t).max_local_bsz) for t in usable} if per_type else {}
            ),
            run_time_by_type_s=dict(job.run_s_by_type) if typed else {},
            single_gpu_throughput_by_type=self._speeds[job.spec.application] if per_type else {},
            restart_delay_s=job.typed.restore_delay_s,
            allocated_at_s=job.allocated_at_s,
            tenant=job.spec.tenant,
            gpus_per_replica_by_type={t: job.typed.gpus_per_replica(t) for t in usable} if job.typed.pipelined else {},
            m0_steps=job.progress,
            epochs_done=job.epochs_done(),
            epochs=job.model.max_epochs,
        )

    def resize(self, cluster: Cluster, kept: Sequence[int], now: float) -> None:
        """Run on `cluster` from `now`: the old nodes `kept` (in order) become its first nodes, the rest are new.
        A job that held GPUs on a node not kept stops here, at a round's boundary (`pollux.sim.nodes`)."""
        for job in self.jobs:
            if job.done or not job.allocation:
                job.allocation = ()
                continue
            moved = moved_allocation(job.allocation, kept, cluster.num_nodes)
            if sum(moved) == 0:
                job.reallocate(moved, now, self.restart_delay_s)
            else:
                job.allocation = moved
        self._cluster = cluster

    def apply(self, decisions: Sequence[Decision], now: float) -> None:
        for decision in decisions:
            job = self._by_name[decision.job]
            if not job.typed.restarts_on_move and _same_shape(job, decision.allocation, decision.gpu_type):
                job.move(decision.allocation, decision.batch)
                continue
            job.reallocate(decision.allocation, now, self.restart_delay_s, decision.batch, decision.gpu_type)


def _same_shape(job: SimJob, allocation: Allocation, gpu_type: str | None) -> bool:
    """Whether `allocation` gives a running job the same GPUs per node, in node order, on its own type."""
    if not job.allocation or sum(allocation) == 0 or (gpu_type or job.gpu_type) != job.gpu_type:
        return False
    return placement(job.allocation) == placement(allocation)
