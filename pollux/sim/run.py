"""Run one policy over one workload on the virtual clock: the engine plus `SimBackend`, rounds every interval."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from pollux.autoscale import AutoscaleSettings, with_nodes
from pollux.cluster import Allocation, Cluster, num_gpus
from pollux.data.philly import philly_service_samples
from pollux.defaults import RESTART_DELAY_S, ROUND_INTERVAL_S
from pollux.engine import Scheduler
from pollux.errors import SimulationError, SpecError
from pollux.lease import Lease
from pollux.policies.base import JobView, Policy
from pollux.policies.placement import packed_placement
from pollux.policies.registry import Input, PolicySettings, make_policy
from pollux.policies.replicas import refusal
from pollux.quota import PerType, QuotaLayer
from pollux.sim.backend import SimBackend, SimJob, SimJobSpec
from pollux.sim.experiments import experiment_summary, job_count, jobs_of
from pollux.sim.jobmodel import JobModel, accumulated_step_time
from pollux.sim.metrics import JobRecord, TimelinePoint, billing_window, node_hours, summarize
from pollux.sim.nodes import ElasticNodes, NodePoint
from pollux.sim.tenant_metrics import TenantRound, tenant_summary
from pollux.sim.typed import TypedJobModel
from pollux.sim.workload import WorkloadJob, experiment_problem
from pollux.tenants import Tenants, held_by_tenant

# The artifact runs ncf at its measured batch on one GPU under elastic policies (docs/design.md, "Simulated jobs").
ARTIFACT_ELASTIC_OVERRIDES: dict[str, tuple[int | None, int]] = {"ncf": (32768, 1)}
MAX_SIMULATED_S = 60 * 24 * 3600  # a run longer than 60 simulated days means a job can never be placed


@dataclass(frozen=True)
class SimConfig:
    """Knobs of a simulated run (docs/design.md, "Simulated jobs"). With `autoscale`, the cluster's one kind of
    node is grown and shrunk between rounds within its bounds (`pollux.sim.nodes`), starting at the minimum, and a
    node asked for is usable `boot_time_s` later (the artifact's simulator: at once). With `tenants`, every policy
    runs under the quota layer (`pollux.quota`) and the run measures each tenant (`pollux.sim.tenant_metrics`)."""

    cluster: Cluster = field(default_factory=Cluster)
    interval_s: int = ROUND_INTERVAL_S
    restart_delay_s: int = RESTART_DELAY_S
    interference: float = 0.0
    autoscale: AutoscaleSettings | None = None
    boot_time_s: float = 0.0
    lease: Lease | None = None  # None: the paper's Pollux, any job may move every round
    tenants: Tenants | None = None  # None: no quota layer, one tenant owning everything

    def largest_cluster(self) -> Cluster:
        """The cluster every job must fit in: this one, or when autoscaled, at its most nodes."""
        return self.cluster if self.autoscale is None else with_nodes(self.cluster, self.autoscale.max_nodes)


@dataclass(frozen=True)
class SimResult:
    policy: str
    jobs: tuple[JobRecord, ...]
    timeline: tuple[TimelinePoint, ...]
    summary: dict[str, float]
    wall_s: float
    # per job, (time_s, GPUs, total batch size) at each round where either changed: the report's per-job timelines
    job_timelines: Mapping[str, tuple[tuple[float, int, int], ...]] = field(default_factory=dict)
    nodes: tuple[NodePoint, ...] = ()  # the node count after every round, when autoscaling
    tenants: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # per tenant, with a tenants file
    tenant_rounds: tuple[TenantRound, ...] = ()  # every round's quota picture, with a tenants file
    experiments: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # per experiment row, if any


def check_workload_fits(
    rows: Sequence[WorkloadJob], models: Collection[str], cluster: Cluster, tenants: Tenants | None = None
) -> None:
    """Refuse a workload the simulator cannot run: a job of an unknown application, one asking for more GPUs than
    the cluster has of one type (a job holds GPUs of one type), an experiment without 1 <= K <= N or a trial named as
    another job is, or, with `tenants`, one of a tenant they do not have (a job without a tenant is the default
    tenant's). `pollux simulate` asks before any progress bar."""
    largest = max(cluster.gpus_of_type(t) for t in cluster.gpu_types)
    has = f"the cluster has {largest}" if largest == cluster.num_gpus else f"its largest GPU type has {largest}"
    names: set[str] = set()
    for row in rows:
        problem = experiment_problem(row.trials, row.concurrency)
        if problem is not None:
            raise SpecError(f"job {row.name}: field {problem[0]!r}: expected {problem[1]}")
        for name, _ in jobs_of(row):
            if name in names:
                raise SpecError(f"job {name}: named twice (a trial's name is its experiment's, /trial-<i>); rename one")
            names.add(name)
        if row.application not in models:
            raise SpecError(f"job {row.name}: unknown application {row.application!r}; known: {sorted(models)}")
        if row.num_replicas > largest:
            raise SpecError(
                f"job {row.name}: asks for {row.num_replicas} GPUs but {has}; "
                "use a larger --cluster (or --nodes/--gpus-per-node) or fix the workload's num_replicas"
            )
        if tenants is not None:
            tenants.check_job(row.name, row.tenant)


def check_policy_runs(rows: Sequence[WorkloadJob], models: Mapping[str, JobModel | TypedJobModel], policy) -> None:
    """Refuse, in one line, a hybrid-parallel job (`pollux.sim.pipeline`) under a policy (class or instance) that
    does not allocate whole replicas (`Policy.whole_replicas`): `pollux simulate` asks before any progress bar."""
    if policy.whole_replicas:
        return
    for row in rows:
        model = models.get(row.application)
        if isinstance(model, TypedJobModel) and model.pipelined:
            per_type = {t: model.gpus_per_replica(t) for t in model.gpu_types}
            raise SpecError(refusal(policy.name, row.name, row.application, per_type))


def job_specs(
    rows: Sequence[WorkloadJob],
    policy: Policy,
    models: Mapping[str, JobModel | TypedJobModel],
    cluster: Cluster,
    tenants: Tenants | None = None,
):
    """Workload rows as the policy's jobs: adaptive ones drop the user's batch; fixed ones keep it. An experiment
    row is its trials (`pollux.sim.experiments`), each with the row's request."""
    check_workload_fits(rows, models, cluster, tenants)
    check_policy_runs(rows, models, policy)
    specs = []
    for row in rows:
        batch: int | None = row.batch_size
        cap = None
        if row.application in ARTIFACT_ELASTIC_OVERRIDES and policy.elastic_gpus:
            override_batch, cap = ARTIFACT_ELASTIC_OVERRIDES[row.application]
            batch = override_batch if policy.batch_owner == "job" else batch
        elif policy.batch_owner != "user":
            batch = None
        if not policy.elastic_gpus:
            cap = row.num_replicas
        specs += [
            SimJobSpec(
                name,
                row.application,
                float(submit_time_s),
                row.num_replicas,
                batch,
                cap,
                batch_by_policy=policy.batch_owner == "policy" and batch is None,
                tenant=row.tenant,
                experiment=row.name if row.is_experiment else None,
            )
            for name, submit_time_s in jobs_of(row)
        ]
    return specs


def simulator_inputs(models: Mapping[str, JobModel | TypedJobModel], data_dir: Path | None = None) -> dict[str, Input]:
    """What the simulator knows that a policy may take (`Policy.inputs`, `pollux.policies.registry.make_policy`).

    `step_time`: true step times from the job models (the artifact's Optimus reads its measured profiles).
    `gittins_service_samples`: GPU-seconds of the Philly trace's jobs (Tiresias' 2D-Gittins distribution).
    """
    return {
        "step_time": lambda: TrueStepTime(models),
        "gittins_service_samples": lambda: philly_service_samples(data_dir),
    }


def simulated_policy(
    name: str,
    config: SimConfig,
    models: Mapping[str, JobModel | TypedJobModel],
    data_dir: Path | None = None,
    **settings: Any,
) -> Policy:
    """The named policy as the simulator runs it: its δ is the simulated restart delay, unless `settings` say
    otherwise (fields of `PolicySettings`), and it gets the simulator's inputs."""
    chosen = PolicySettings(**{"restart_delay_s": float(config.restart_delay_s), **settings})
    return make_policy(name, chosen, simulator_inputs(models, data_dir))


class TrueStepTime:
    """Seconds per step of a job from its job model, accumulation included (`accumulated_step_time`), on GPUs of
    `gpu_type` (None: the model's first type, the only one of a one-type cluster)."""

    def __init__(self, models: Mapping[str, JobModel | TypedJobModel]) -> None:
        self._models = models

    def __call__(
        self,
        job: JobView,
        placement: tuple[int, ...],
        local_bsz: int,
        accum_steps: int,
        gpu_type: str | None = None,
    ) -> float:
        model = self._models[job.application]
        if isinstance(model, TypedJobModel):
            model = model.on(gpu_type or model.gpu_types[0])
        step_s, sync_s = model.step_time(placement, local_bsz)
        return accumulated_step_time(step_s, sync_s, accum_steps)


def isolated_jct(job: SimJob, gpus: int, config: SimConfig, gpu_type: str | None = None) -> float:
    """JCT of `job`'s model alone on `gpus` GPUs packed on the largest nodes of `gpu_type` (None: the type it ran on
    last; at most all of them), from submission, with one restart delay."""
    cluster, gpu_type = config.cluster, gpu_type or job.gpu_type
    sizes = [cluster.node_gpus[n] for n in cluster.nodes_of_type(gpu_type)]
    alloc = packed_placement(min(gpus, sum(sizes)), sizes)
    # The job alone keeps the throughput models it learned in the shared run, rather than learning them again.
    solo = SimJob(
        job.spec,
        job.typed,
        fit_throughput_model=False,
        type_aware=job.type_aware,
        gpu_type=gpu_type,
        params_by_type=dict(job.params_by_type),
    )
    solo.reallocate(alloc, 0.0, config.restart_delay_s)
    solo.advance(0.0, float(MAX_SIMULATED_S))
    return float(solo.completion_time_s) if solo.completion_time_s is not None else float("nan")


def fair_share(job: SimJob, gpus: int, contention: float, gpu_type: str | None = None) -> int:
    """A fair 1/J share of `gpus` GPUs for J = `contention` jobs: max(1, round(gpus / J)), at most what `job` may
    use on `gpu_type` (None: the type it ran on last), in whole replicas there (at least one)."""
    share = max(1, min(round(gpus / max(contention, 1.0)), job.max_gpus(gpu_type)))
    per_replica = job.typed.gpus_per_replica(gpu_type or job.gpu_type)
    return max(share // per_replica, 1) * per_replica


def alone_by_type(job: SimJob, contention: float, config: SimConfig, known: tuple[str, int, float]) -> dict[str, float]:
    """The job's JCT alone on a fair share (`fair_share`) of each GPU type's GPUs, for the types it has a model of,
    in the cluster's order; `known` is the isolated run made already, (type, GPUs, JCT): on one type, the only one."""
    cluster = config.cluster
    alone: dict[str, float] = {}
    for gpu_type in cluster.gpu_types:
        if gpu_type in job.typed.gpu_types:
            gpus = fair_share(job, cluster.gpus_of_type(gpu_type), contention, gpu_type)
            alone[gpu_type] = known[2] if (gpu_type, gpus) == known[:2] else isolated_jct(job, gpus, config, gpu_type)
    return alone


def sia_fairness(jct: float, alone: Mapping[str, float], cluster: Cluster) -> float:
    """ρ by Sia's Equation 3, Σ_g P(G = g)·ρ_g: ρ_g = `jct` / `alone[g]`, the JCT alone on a fair share of type g's
    N_g GPUs, and P(G = g) = N_g / N, type g's share of the GPUs. A type the job has no model for cannot run it and is
    not in `alone`: N counts the GPUs of the types it may use (on one type, P = 1 and ρ is Themis' ρ exactly)."""
    total = sum(cluster.gpus_of_type(t) for t in alone)
    return sum(cluster.gpus_of_type(t) / total * (jct / jct_alone) for t, jct_alone in alone.items())


def simulate(
    rows: Sequence[WorkloadJob],
    policy: Policy,
    models: Mapping[str, JobModel | TypedJobModel],
    config: SimConfig = SimConfig(),
    on_round: Callable[[float, int, int], None] | None = None,
) -> SimResult:
    """Replay `rows` under `policy`. `on_round(now, finished, total)` reports progress as it starts (the clock of
    a progress bar then counts what `wall_s` counts) and after every round."""
    started = time.perf_counter()
    if on_round is not None:
        on_round(0.0, 0, job_count(rows))
    elastic = None
    if config.autoscale is not None:
        elastic = ElasticNodes(config.cluster, config.autoscale, config.boot_time_s)
        config = replace(config, cluster=elastic.largest)  # what jobs must fit in, and fair shares are taken of
    backend = SimBackend(
        config.cluster if elastic is None else elastic.start,
        job_specs(rows, policy, models, config.cluster, config.tenants),
        models,
        restart_delay_s=config.restart_delay_s,
        interference=config.interference,
        fit_throughput_model=policy.uses_throughput_model,
        type_aware=policy.gpu_type_aware,
    )
    quota = QuotaLayer(config.tenants) if config.tenants is not None else None
    scheduler = Scheduler(policy, backend, config.lease, quota)
    interval_s = policy.round_s or config.interval_s  # a policy with rounds of its own (Gavel) keeps them
    tenant_of = {job.spec.name: job.spec.tenant for job in backend.jobs}
    timeline: list[TimelinePoint] = []
    rounds: list[TenantRound] = []
    tracks: dict[str, list[tuple[float, int, int]]] = {}
    now = 0.0
    while not backend.all_done():
        if now > MAX_SIMULATED_S:
            stuck = [job.spec.name for job in backend.jobs if not job.done][:5]
            raise SimulationError(f"{policy.name}: jobs {stuck} still unfinished after 60 simulated days")
        backend.advance(now, interval_s)
        now += interval_s
        if elastic is not None:
            elastic.round(backend, policy, now)
        decided = scheduler.step(now)
        if decided.quota is not None:
            rounds.append(
                TenantRound(decided.quota, _held(decided.allocations, tenant_of, backend.cluster), interval_s)
            )
        active = backend.active(now)
        running = [job for job in active if job.allocation]
        by_type = dict.fromkeys(config.cluster.gpu_types, 0)
        for job in running:
            by_type[job.gpu_type] += job.num_gpus
        timeline.append(TimelinePoint(now, sum(by_type.values()), len(running), len(active) - len(running), by_type))
        _track(tracks, active, now)
        if on_round is not None:
            on_round(now, sum(job.done for job in backend.jobs), len(backend.jobs))
    experiments = any(row.is_experiment for row in rows)
    records = _records(backend, timeline, config, experiments)
    summary = summarize(records, timeline, {t: config.cluster.gpus_of_type(t) for t in config.cluster.gpu_types})
    if elastic is not None:
        summary |= autoscale_summary(records, timeline, elastic)
    nodes = tuple(elastic.points) if elastic is not None else ()
    per_tenant: dict[str, dict[str, float]] = {}
    if config.tenants is not None:
        per_tenant, overall = tenant_summary(config.tenants, rounds, records)
        summary |= overall
    return SimResult(
        policy.name,
        records,
        tuple(timeline),
        summary,
        time.perf_counter() - started,
        {name: tuple(points) for name, points in tracks.items()},
        nodes,
        per_tenant,
        tuple(rounds),
        experiment_summary(records),
    )


def _held(allocations: Mapping[str, Allocation], tenant_of: Mapping[str, str], cluster: Cluster) -> PerType:
    """GPUs per tenant and type the jobs hold after a round (a job restoring holds its GPUs)."""
    return held_by_tenant(
        (tenant_of[name], cluster.allocation_type(alloc), num_gpus(alloc)) for name, alloc in allocations.items()
    )


def autoscale_summary(
    records: Sequence[JobRecord], timeline: Sequence[TimelinePoint], elastic: ElasticNodes
) -> dict[str, float]:
    """What an autoscaled run adds to the summary: `node_hours` (nodes billed, booting included, from the first
    submission to the last completion), their time-weighted mean and maximum, the searches that resized, and GPU
    utilization over the GPUs ready each round instead of a fixed total."""
    points = elastic.points
    steps = [(0.0, elastic.start.num_nodes)] + [(p.time_s, p.nodes_billed) for p in points]
    start, end = billing_window(records)
    hours = node_hours(steps, start, end)
    per_node = elastic.start.groups[0].gpus_per_node
    busy = [
        t.gpus_in_use / (p.nodes_ready * per_node)
        for t, p in zip(timeline, points, strict=True)
        if t.jobs_running + t.jobs_queued > 0
    ]
    utilization = float(np.mean(busy)) if busy else 0.0
    return {
        "node_hours": hours,
        "nodes_mean": hours * 3600 / (end - start) if end > start else float(elastic.start.num_nodes),
        "nodes_max": float(max((n for _, n in steps), default=0)),
        "gpu_utilization": utilization,
        f"gpu_utilization_{elastic.start.gpu_types[0]}": utilization,
    }


def _track(tracks: dict[str, list[tuple[float, int, int]]], active: Sequence[SimJob], now: float) -> None:
    """Add a point to each active job's (time, GPUs, batch) track where its GPUs or batch changed this round."""
    for job in active:
        point = (now, job.num_gpus, job.batch_size() if job.allocation else 0)
        track = tracks.setdefault(job.spec.name, [])
        if not track or track[-1][1:] != point[1:]:
            track.append(point)


def _records(
    backend: SimBackend, timeline: Sequence[TimelinePoint], config: SimConfig, experiments: bool = False
) -> tuple[JobRecord, ...]:
    """Each job's record; in a run with experiments, each names its experiment ("" for a job of none)."""
    times = np.array([p.time_s for p in timeline])
    active = np.array([p.jobs_running + p.jobs_queued for p in timeline], dtype=np.float64)
    cluster = config.cluster
    total_gpus = cluster.num_gpus
    records = []
    for job in backend.jobs:
        spec, finish = job.spec, job.completion_time_s
        jct = None if finish is None else finish - spec.submit_time_s
        window = (times >= spec.submit_time_s) & (times <= (finish if finish is not None else times[-1]))
        contention = float(active[window].mean()) if np.any(window) else 1.0
        share = fair_share(job, total_gpus, contention)
        alone = isolated_jct(job, share, config)
        expected = None
        if jct is not None and alone:
            expected = sia_fairness(jct, alone_by_type(job, contention, config, (job.gpu_type, share, alone)), cluster)
        records.append(
            JobRecord(
                name=spec.name,
                application=spec.application,
                submit_s=spec.submit_time_s,
                start_s=job.start_time_s,
                finish_s=finish,
                jct_s=jct,
                restarts=job.num_restarts or 0,
                gpu_seconds=job.attained_gpu_s,
                queueing_s=(jct if jct is not None else 0.0) - job.running_s,
                fair_share_gpus=share,
                isolated_jct_s=alone,
                fairness=None if jct is None or not alone else jct / alone,
                gpu_seconds_by_type={t: job.gpu_s_by_type.get(t, 0.0) for t in config.cluster.gpu_types},
                tenant=spec.tenant if config.tenants is not None else None,
                sia_fairness=expected,
                experiment=(spec.experiment or "") if experiments else None,
            )
        )
    return tuple(records)
