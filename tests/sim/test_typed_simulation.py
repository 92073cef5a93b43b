"""The simulator on clusters of several GPU types: one type per job, per-type time and GPU-hours, per-model restore
delays and calibration, and the summary's heterogeneity metrics."""

from __future__ import annotations

import numpy as np
import pytest

from pollux.cluster import Cluster, NodeGroup
from pollux.data.locate import find_data_dir
from pollux.engine import Decision, DecisionKind
from pollux.errors import DataNotFoundError, SpecError
from pollux.sim.backend import SimBackend, SimJob, SimJobSpec
from pollux.sim.jobmodel import JobModel, run_time_s
from pollux.sim.measured import load_measured_models
from pollux.sim.run import SimConfig, simulate, simulated_policy
from pollux.sim.typed import TypedJobModel
from pollux.sim.workload import WorkloadJob


class Faster:
    """A job model whose steps take `1/speed` of another's: a second GPU type for tests."""

    def __init__(self, model: JobModel, speed: float) -> None:
        self._model, self._speed = model, speed

    def __getattr__(self, name: str):
        return getattr(self._model, name)

    def step_time(self, placement: tuple[int, ...], local_bsz: int) -> tuple[float, float]:
        step, sync = self._model.step_time(placement, local_bsz)
        return step / self._speed, sync / self._speed


@pytest.fixture(scope="module")
def models() -> dict[str, TypedJobModel]:
    try:
        find_data_dir()
    except DataNotFoundError:
        pytest.skip("needs the Pollux artifact's profiles (../shared/data or `pollux data fetch`)")
    measured = load_measured_models()
    return {
        name: TypedJobModel(name, {"slow": model, "fast": Faster(model, 3.0)})
        for name, model in measured.items()
        if name in ("cifar10", "ncf", "deepspeech2")
    }


CLUSTER = Cluster.of_groups([NodeGroup("slow", 2, 4), NodeGroup("fast", 1, 8)])


def workload(count: int, seed: int) -> list[WorkloadJob]:
    rng = np.random.default_rng(seed)
    apps = ["cifar10", "ncf", "deepspeech2"]
    batches = {"cifar10": 128, "ncf": 32768, "deepspeech2": 40}
    rows = []
    for i in range(count):
        app = apps[int(rng.integers(0, len(apps)))]
        rows.append(
            WorkloadJob(f"{app}-{i}", int(rng.integers(0, 1800)), app, int(rng.choice([1, 2, 4])), batches[app])
        )
    return rows


@pytest.mark.parametrize("policy_name", ["pollux", "pollux-unaware", "gavel"])
def test_every_job_finishes_on_one_type_at_a_time_and_gpu_time_adds_up_by_type(models, policy_name):
    config = SimConfig(cluster=CLUSTER)
    result = simulate(workload(12, 1), simulated_policy(policy_name, config, models), models, config)
    assert all(job.finish_s is not None for job in result.jobs)
    for job in result.jobs:
        assert set(job.gpu_seconds_by_type) <= {"slow", "fast"}
        assert sum(job.gpu_seconds_by_type.values()) == pytest.approx(job.gpu_seconds)
    summary = result.summary
    assert summary["gpu_hours_per_job"] == pytest.approx(np.mean([j.gpu_seconds for j in result.jobs]) / 3600)
    assert 0 < summary["contention_mean"] <= summary["contention_max"] <= 12
    for gpu_type in ("slow", "fast"):
        assert 0 <= summary[f"gpu_utilization_{gpu_type}"] <= 1
    in_use = [p.gpus_in_use_by_type for p in result.timeline]
    assert all(g["slow"] <= 8 and g["fast"] <= 8 for g in in_use)
    assert any(g["fast"] > 0 for g in in_use)


def test_a_job_runs_at_the_speed_of_the_type_it_holds(models):
    spec = SimJobSpec("d", "deepspeech2", 0.0, 4, 80)
    times = {}
    for gpu_type in ("slow", "fast"):
        job = SimJob(spec, models["deepspeech2"])
        job.reallocate((4,), 0.0, 0.0, gpu_type=gpu_type)
        job.advance(0.0, 1e7)
        times[gpu_type] = job.completion_time_s
    epochs = models["deepspeech2"].on("slow").max_epochs  # each epoch ends on a whole second, as the artifact's
    assert times["slow"] == pytest.approx(3 * times["fast"], abs=3 * epochs)


def test_calibration_slows_progress_and_the_models_restore_delay_replaces_the_restart_delay(models):
    base = models["cifar10"]
    calibrated = TypedJobModel("cifar10", base.by_type, progress_slowdown=1.8, restore_delay_s=50.0)
    spec = SimJobSpec("c", "cifar10", 0.0, 2, 256)
    job = SimJob(spec, calibrated)
    job.reallocate((2,), 0.0, restart_delay_s=30.0, gpu_type="slow")
    assert job.restart_left_s == 50.0
    job.advance(0.0, 1e8)
    alone = run_time_s(base.on("slow"), (2,), 128)
    assert job.completion_time_s == pytest.approx(50.0 + 1.8 * alone, rel=0.01)


def decided(kind: DecisionKind, allocation: tuple[int, ...]) -> Decision:
    """What the engine hands the backend for job "c": the decision with the GPU type of its allocation."""
    return Decision("c", kind, allocation, gpu_type=CLUSTER.allocation_type(allocation))


@pytest.mark.parametrize("restarts_on_move", [True, False])
def test_a_move_restarts_a_job_unless_its_model_restarts_only_on_a_new_shape_or_type(models, restarts_on_move):
    """The Pollux artifact's simulator restarts a job on any change of its GPUs; Sia's only when its GPUs per node
    (or its type) change: a move to other nodes of the same shape is free there."""
    base = models["cifar10"]
    typed = TypedJobModel("cifar10", base.by_type, restore_delay_s=50.0, restarts_on_move=restarts_on_move)
    backend = SimBackend(CLUSTER, [SimJobSpec("c", "cifar10", 0.0, 2, 256)], {"cifar10": typed})
    job = backend.jobs[0]
    backend.apply([decided("start", (2, 0, 0))], 0.0)
    backend.advance(0.0, 120.0)
    assert (job.num_restarts, job.restart_left_s) == (0, 0.0)
    progress = job.progress
    backend.apply([decided("resize", (0, 2, 0))], 120.0)  # other slow node, same shape
    assert job.allocation == (0, 2, 0)
    moved_free = not restarts_on_move
    assert (job.num_restarts, job.restart_left_s) == ((0, 0.0) if moved_free else (1, 50.0))
    assert job.progress == progress
    backend.apply([decided("resize", (1, 1, 0))], 180.0)  # a new shape restarts either way
    assert job.restart_left_s == 50.0
    backend.apply([decided("resize", (0, 0, 2))], 240.0)  # so does a new type, with the same shape
    assert (job.gpu_type, job.restart_left_s) == ("fast", 50.0)
    assert job.num_restarts == (2 if moved_free else 3)


def test_an_application_without_a_model_for_any_type_of_the_cluster_is_refused(models):
    only_fast = {"cifar10": TypedJobModel("cifar10", {"fast": models["cifar10"].on("fast")})}
    with pytest.raises(SpecError, match=r"cifar10.*none of which"):
        SimBackend(Cluster(2, 4, "slow"), [SimJobSpec("c", "cifar10", 0.0, 1, 128)], only_fast)


def test_a_type_unaware_backend_pools_its_samples_and_shows_one_model(models):
    backend = SimBackend(CLUSTER, [SimJobSpec("c", "cifar10", 0.0, 1, None)], models, type_aware=False)
    job = backend.jobs[0]
    job.reallocate((0, 0, 2), 0.0, 0.0, gpu_type="fast")
    job.advance(0.0, 120.0)
    job.reallocate((2, 0, 0), 120.0, 0.0, gpu_type="slow")
    job.advance(120.0, 120.0)
    (view,) = backend.job_views(240.0)
    assert view.throughput_params is not None and not view.throughput_params_by_type
    assert view.local_bsz_bounds == (
        models["cifar10"].on("slow").min_local_bsz,
        models["cifar10"].on("slow").max_local_bsz,
    )
    assert set(view.run_time_by_type_s) == {"slow", "fast"}


@pytest.mark.parametrize(
    "policy_name", ["pollux", "gavel", "tiresias", "optimus", "elastic-dp", "pollux-unaware", "astraea"]
)
def test_every_round_keeps_each_types_capacity_and_each_jobs_memory_on_its_type(policy_name):
    """Per-GPU batches within the memory of the type a job runs on (T4 holds less than the A100), GPUs within each
    type's, round after round, with the Sia artifact's models."""
    from pollux.cluster_spec import load_cluster
    from pollux.engine import Scheduler
    from pollux.sim.run import job_specs
    from pollux.sim.typed import load_typed_models
    from pollux.sim.workload import read_workload

    try:
        models = load_typed_models("sia-sosp23")
    except DataNotFoundError:
        pytest.skip("needs the Sia artifact's data (../shared/data or `pollux data fetch`)")
    cluster = load_cluster("sia-heterogeneous")
    rows = read_workload("philly/workload-2", applications=models).jobs[:40]
    config = SimConfig(cluster=cluster)
    policy = simulated_policy(policy_name, config, models)
    backend = SimBackend(cluster, job_specs(rows, policy, models, cluster), models, type_aware=policy.gpu_type_aware)
    scheduler, now, seen_types = Scheduler(policy, backend), 0.0, set()
    for _ in range(240):
        backend.advance(now, 60)
        now += 60
        scheduler.step(now)
        used = dict.fromkeys(cluster.gpu_types, 0)
        for job in backend.active(now):
            if not job.allocation:
                continue
            gpu_type = cluster.allocation_type(job.allocation)
            assert gpu_type == job.gpu_type
            used[gpu_type] += job.num_gpus
            model = job.typed.on(gpu_type)
            assert model.min_local_bsz <= job.local_bsz <= model.max_local_bsz, (job.spec.name, gpu_type)
            seen_types.add(gpu_type)
        assert all(used[t] <= cluster.gpus_of_type(t) for t in cluster.gpu_types)
    assert len(seen_types) >= 2


# Sia's Equation 3 (docs/design.md, "Metrics"): P(slow) = 12/16 and P(fast) = 4/16 of the GPUs.
SKEWED = Cluster.of_groups([NodeGroup("slow", 3, 4), NodeGroup("fast", 1, 4)])


def lone_run(row: WorkloadJob, models, cluster: Cluster):
    """The one job of a workload of one, under fifo (its GPUs and batch fixed) on `cluster`."""
    config = SimConfig(cluster=cluster)
    (job,) = simulate([row], simulated_policy("fifo", config, models), models, config).jobs
    return job


def test_sia_fairness_weighs_rho_on_each_types_gpus_alone_by_the_types_share_of_the_gpus(models):
    row = WorkloadJob("c", 0, "cifar10", 4, 512)
    job = lone_run(row, models, SKEWED)
    # Alone on each type's GPUs: what a cluster of that type only measures as the job's isolated JCT (J = 1).
    slow = lone_run(row, models, Cluster.of_groups([NodeGroup("slow", 3, 4)])).isolated_jct_s
    fast = lone_run(row, models, Cluster.of_groups([NodeGroup("fast", 1, 4)])).isolated_jct_s
    assert fast < slow / 2
    assert job.sia_fairness == pytest.approx(12 / 16 * job.jct_s / slow + 4 / 16 * job.jct_s / fast, rel=1e-12)


def test_a_type_a_job_has_no_model_for_leaves_its_sia_fairness(models):
    """A job that cannot run on `fast` is compared with the slow GPUs alone: P(slow) is 1 for it, not 12/16."""
    slow_only = {"cifar10": TypedJobModel("cifar10", {"slow": models["cifar10"].on("slow")})}
    job = lone_run(WorkloadJob("c", 0, "cifar10", 4, 512), slow_only, SKEWED)
    assert job.sia_fairness == job.jct_s / job.isolated_jct_s == job.fairness
