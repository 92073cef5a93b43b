"""The engine on the virtual clock: restarts counted from decisions, run times as the job model says."""

import numpy as np
import pytest

from pollux.cluster import Cluster
from pollux.data.locate import find_data_dir
from pollux.engine import Scheduler, diff
from pollux.errors import SpecError
from pollux.goodput import iteration_time
from pollux.policies.registry import make_policy
from pollux.sim.backend import SimBackend, SimJob, SimJobSpec
from pollux.sim.jobmodel import accumulated_step_time, run_time_s
from pollux.sim.measured import load_measured_models
from pollux.sim.run import SimConfig, simulate
from pollux.sim.typed import TypedJobModel
from pollux.sim.workload import WorkloadJob


@pytest.fixture(scope="module")
def models():
    return load_measured_models(find_data_dir().path)


def row(name, submit, app, gpus, batch):
    return WorkloadJob(name=name, submit_time_s=submit, application=app, num_replicas=gpus, batch_size=batch)


@pytest.mark.parametrize("app,gpus,batch", [("cifar10", 1, 128), ("cifar10", 4, 512), ("bert", 2, 24)])
def test_a_lone_job_takes_its_run_time_plus_one_restart_delay(models, app, gpus, batch):
    config = SimConfig(cluster=Cluster(2, 4), interval_s=60, restart_delay_s=30)
    result = simulate([row("solo", 60, app, gpus, batch)], make_policy("fifo"), models, config)
    (job,) = result.jobs
    model = models[app]
    local = batch // gpus
    expected = config.restart_delay_s + run_time_s(model, (gpus,), local)
    # The artifact's clock rounds each epoch's end to a whole second.
    assert job.jct_s == pytest.approx(expected, abs=0.5 * model.max_epochs + 1)
    assert job.restarts == 0
    assert job.start_s == 60


def test_accumulation_repeats_the_compute_of_a_step_but_not_its_sync():
    assert accumulated_step_time(2.0, 0.5, 0) == 2.0
    assert accumulated_step_time(2.0, 0.5, 3) == 2.0 + 3 * 1.5
    np.testing.assert_array_equal(accumulated_step_time(np.array([2.0, 1.0]), 0.5, np.array([3, 0])), [6.5, 1.0])


def test_diff_turns_allocations_into_explicit_decisions(models):
    backend = SimBackend(
        Cluster(2, 4),
        [SimJobSpec("a", "cifar10", 0, 2, 256), SimJobSpec("b", "cifar10", 0, 2, 256)],
        models,
    )
    views = backend.job_views(0)
    decisions = diff(views, {"a": (2, 0), "b": (0, 2)}, backend.cluster)
    assert [(d.job, d.kind, d.gpu_type) for d in decisions] == [("a", "start", "aws"), ("b", "start", "aws")]
    backend.apply(decisions, 0)
    decisions = diff(backend.job_views(60), {"a": (1, 1)}, backend.cluster)
    assert [(d.job, d.kind, d.gpu_type) for d in decisions] == [("a", "resize", "aws"), ("b", "stop", None)]


def test_restarts_are_counted_from_reallocations(models):
    backend = SimBackend(Cluster(2, 4), [SimJobSpec("a", "cifar10", 0, 2, 256)], models)
    scheduler = Scheduler(make_policy("fifo"), backend)
    scheduler.step(0)
    job = backend.jobs[0]
    assert job.num_restarts == 0 and job.restart_left_s == 30
    backend.apply(diff(backend.job_views(60), {"a": (1, 1)}, backend.cluster), 60)
    assert job.num_restarts == 1


def test_same_workload_and_policy_give_identical_results(models):
    rows = [
        row(f"j{i}", 60 * i, app, 2, 256 if app == "cifar10" else 24)
        for i, app in enumerate(["cifar10", "bert", "cifar10", "bert", "cifar10"])
    ]
    config = SimConfig(cluster=Cluster(1, 4))
    first = simulate(rows, make_policy("tiresias"), models, config)
    second = simulate(rows, make_policy("tiresias"), models, config)
    assert first.jobs == second.jobs
    assert first.summary["avg_jct_s"] == second.summary["avg_jct_s"]


@pytest.mark.parametrize("policy_name", ["fifo", "pollux"])
def test_on_one_gpu_type_sias_fairness_is_themis_rho_exactly(models, policy_name):
    rows = [
        row(f"j{i}", 300 * i, app, 2, 256 if app == "cifar10" else 24)
        for i, app in enumerate(["cifar10", "bert", "cifar10", "bert", "cifar10", "cifar10"])
    ]
    result = simulate(rows, make_policy(policy_name), models, SimConfig(cluster=Cluster(2, 4)))
    assert all(job.fairness is not None for job in result.jobs)
    assert [job.sia_fairness for job in result.jobs] == [job.fairness for job in result.jobs]
    assert result.summary["sia_worst_fairness"] == result.summary["worst_fairness"]
    assert result.summary["sia_unfair_share"] == result.summary["unfair_share"]
    assert list(result.jobs[0].as_row())[-1] == "sia_fairness"


def test_a_job_larger_than_the_cluster_is_refused_before_simulating(models):
    with pytest.raises(SpecError, match="asks for 16 GPUs"):
        simulate([row("big", 0, "cifar10", 16, 2048)], make_policy("fifo"), models, SimConfig(Cluster(2, 4)))


def test_gittins_service_distribution_falls_back_to_committed_quantiles(tmp_path, monkeypatch):
    from pollux.sim.run import philly_service_samples

    monkeypatch.setenv("POLLUX_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("POLLUX_CACHE_DIR", str(tmp_path / "cache"))
    samples = philly_service_samples()
    assert len(samples) == 201
    assert samples == sorted(samples) and samples[0] >= 60  # kept jobs ran at least a minute on >= 1 GPU


def test_the_simulator_gives_optimus_true_step_times_and_fifo_nothing(models):
    from pollux.sim.run import TrueStepTime, simulated_policy

    optimus = simulated_policy("optimus", SimConfig(), models)
    assert isinstance(optimus._step_time, TrueStepTime) and not optimus.uses_throughput_model
    assert simulated_policy("fifo", SimConfig(), models).uses_throughput_model is False


def test_a_jobs_throughput_model_depends_on_what_it_ran_not_on_the_order_it_ran_it(models):
    """Every refit starts afresh, as the artifact's agents do: two jobs that explored the same configurations in
    different orders hold the same model."""
    runs = [((1,), 8), ((2,), 8), ((4,), 8), ((4, 4), 8), ((3,), 8), ((2,), 4)]
    fitted = []
    for order in (runs, runs[::-1]):
        job = SimJob(SimJobSpec("y", "yolov3", 0, 1, None), TypedJobModel("yolov3", {"aws": models["yolov3"]}))
        for place, local in order:
            job.local_bsz = local
            job.record_sample(len(place), sum(place), *models["yolov3"].step_time(place, local))
        fitted.append(job.params)
    assert fitted[0] is not None and fitted[1] is not None
    replicas = np.arange(1, 17)
    for nodes in (1, 2):
        first, second = (iteration_time(p, nodes, replicas, 8) for p in fitted)
        np.testing.assert_allclose(first, second, rtol=0.02)
