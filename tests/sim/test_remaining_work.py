"""The work a job has left, as the policy sees it (`JobView.remaining_m0_steps`): the simulator and the runtime
estimate it by the one rule (`pollux.policies.facts.remaining_m0_steps`) from what a job's agent reports, its
statistical progress and epochs done of those its loop declares."""

from pathlib import Path

import pytest

from pollux.agent.report import BatchInUse, JobReport, Progress
from pollux.cluster import Cluster
from pollux.data.locate import find_data_dir
from pollux.engine import diff
from pollux.goodput import GradientStats
from pollux.policies.facts import job_view
from pollux.runtime.backend import job_facts
from pollux.runtime.spec import parse_spec
from pollux.runtime.store import JobState
from pollux.sim.backend import SimBackend, SimJobSpec
from pollux.sim.measured import load_measured_models

REPO = Path(__file__).resolve().parents[2]
CLUSTER = Cluster(1, 4)


@pytest.fixture(scope="module")
def models():
    return load_measured_models(find_data_dir().path)


def test_the_simulator_and_the_runtime_show_the_same_work_left_for_the_same_progress(models):
    backend = SimBackend(CLUSTER, [SimJobSpec("a", "cifar10", 0, 2, None)], models)
    assert backend.job_views(0)[0].remaining_m0_steps is None  # no progress yet: unknown, as in the runtime
    backend.apply(diff(backend.job_views(0), {"a": (2,)}, backend.cluster), 0)
    backend.advance(0, 900)
    job = backend.jobs[0]
    (simulated,) = backend.job_views(900)
    model = job.model
    assert 0 < job.epoch < model.max_epochs
    truth = model.epoch_progress(model.max_epochs) - job.progress
    assert simulated.remaining_m0_steps == pytest.approx(truth, rel=0.05)

    size = 1000
    progress = Progress(
        epoch=job.epoch,
        epoch_examples=round((job.epochs_done() - job.epoch) * size),
        epoch_size=size,
        steps=100,
        examples=100 * 128,
        m0_steps=job.progress,
        epochs=model.max_epochs,
    )
    report = JobReport(
        status="running",
        job_name="a",
        started_at_s=0.0,
        written_at_s=900.0,
        init_batch_size=128,
        max_batch_size=4096,
        local_bsz_bounds=(32, 256),
        gradient_accumulation=True,
        adaptive_batch_size=True,
        throughput_params=None,
        grad_stats=GradientStats(sqr=1.0, var=5.0),
        batch=BatchInUse(num_nodes=1, num_replicas=2, local_bsz=64, accum_steps=0),
        progress=progress,
        max_replicas_seen=2,
        throughput_configs=1,
        restarts=0,
    )
    data = {"name": "a", "command": ["python", "examples/digits_mlp.py"], "init_batch_size": 128}
    state = JobState("a", data, "running", 0.0, 0.0, (2,), 0, 0, 0, False, None)  # type: ignore[arg-type]
    real = job_view(job_facts(parse_spec(data, base=REPO), state, report, CLUSTER, 0.0))
    assert real.remaining_m0_steps == pytest.approx(simulated.remaining_m0_steps, rel=1e-3)
