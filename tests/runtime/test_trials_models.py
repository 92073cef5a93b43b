"""A trial of `pollux tune` that has not reported yet starts from its experiment's throughput model, as the
simulator's trials do (docs/design.md, "Experiments"): the policy sees the model and the most GPUs run of its
experiment's trial that ran on the most, never that trial's gradient statistics. Pure functions, fast."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pollux.agent.report import BatchInUse, JobReport, Progress
from pollux.cluster import Cluster
from pollux.goodput import GradientStats, ThroughputParams
from pollux.policies.facts import job_view
from pollux.runtime.backend import job_facts, trials_models
from pollux.runtime.spec import parse_spec
from pollux.runtime.store import JobState

REPO = Path(__file__).resolve().parents[2]
CLUSTER = Cluster(2, 4)
MODEL = ThroughputParams(0.02, 0.0008, 0.03, 0.003, 0.12, 0.003, 2.0)


def report(name: str, replicas: int, params: ThroughputParams | None = MODEL) -> JobReport:
    return JobReport(
        status="running",
        job_name=name,
        started_at_s=0.0,
        written_at_s=60.0,
        init_batch_size=32,
        max_batch_size=1024,
        local_bsz_bounds=(16, 256),
        gradient_accumulation=True,
        adaptive_batch_size=True,
        throughput_params=params,
        grad_stats=GradientStats(sqr=1.0, var=5.0),
        batch=BatchInUse(num_nodes=1, num_replicas=replicas, local_bsz=32, accum_steps=0),
        progress=Progress(epoch=1, epoch_examples=0, epoch_size=1000, steps=10, examples=320, m0_steps=10.0),
        max_replicas_seen=replicas,
        throughput_configs=2,
        restarts=0,
    )


def state(name: str, experiment: str | None, status: str = "running") -> JobState:
    spec = {"name": name, "command": ["python", "examples/digits_mlp.py"], "init_batch_size": 32}
    spec["max_batch_size"] = 1024
    if experiment is not None:
        spec["experiment"] = experiment
    return JobState(name, spec, status, 0.0, 0.0, (), 0, 0, 0, False, None)  # type: ignore[arg-type]


def test_each_experiment_starts_from_its_trial_that_ran_on_the_most_gpus_finished_or_not():
    states = [state("a-1", "a", "completed"), state("a-2", "a"), state("a-3", "a"), state("b-1", "b"), state("c", None)]
    reports = {
        "a-1": report("a-1", 4),
        "a-2": report("a-2", 2),
        "a-3": None,  # not reported yet
        "b-1": report("b-1", 8, params=None),  # no model yet: nothing to start from
        "c": report("c", 8),  # not a trial
    }
    models = trials_models(states, reports.get)
    assert set(models) == {"a"} and models["a"].job_name == "a-1"


def test_a_trial_without_a_report_takes_the_model_and_bound_but_not_the_statistics():
    fresh = state("a-3", "a")
    spec = parse_spec(fresh.spec, base=REPO)
    started = job_view(job_facts(spec, fresh, None, CLUSTER, 0.0, report("a-1", 4)))
    assert started.throughput_params == MODEL and started.grad_stats is None
    assert started.max_gpus == 8  # twice the 4 GPUs its experiment has run on
    alone = job_view(job_facts(spec, fresh, None, CLUSTER, 0.0))
    assert alone.throughput_params is None and alone.max_gpus == 1
    own = replace(report("a-3", 1), throughput_params=ThroughputParams(0.01, 0.001, 0.0, 0.0, 0.0, 0.0, 1.0))
    reported = job_view(job_facts(spec, fresh, own, CLUSTER, 0.0, report("a-1", 4)))
    assert reported.throughput_params == own.throughput_params and reported.max_gpus == 2  # its own, once it reports
