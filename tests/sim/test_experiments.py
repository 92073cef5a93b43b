"""Experiments in the simulator: a row of N trials, K at a time, becomes N jobs that arrive only as slots free; a later
trial starts from the throughput its experiment measured; bad N and K are refused naming the row and field; the
paper's static baseline is `fifo` on the row's own request (4 GPUs, a fixed per-GPU batch); and the per-experiment
summary (makespan beside per-trial JCT) reaches summary.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from pollux.cluster import Cluster
from pollux.errors import SpecError, TraceError
from pollux.sim.backend import SimBackend, SimJobSpec
from pollux.sim.cli import group_table
from pollux.sim.experiments import WAITING_S, jobs_of, trial_name
from pollux.sim.parametric import load_catalog
from pollux.sim.report import summary_json
from pollux.sim.report_html import report_data
from pollux.sim.run import SimConfig, SimResult, check_workload_fits, simulate, simulated_policy
from pollux.sim.workload import Workload, WorkloadJob, read_workload, write_workload

HEADER = "name,time,application,num_replicas,batch_size,trials,concurrency\n"
CLUSTER = Cluster(2, 4)  # 8 aws GPUs


@pytest.fixture(scope="module")
def models():
    return load_catalog()


def run(rows: list[WorkloadJob], policy: str, models, cluster: Cluster = CLUSTER) -> SimResult:
    config = SimConfig(cluster=cluster)
    return simulate(rows, simulated_policy(policy, config, models), models, config)


def test_an_experiment_row_is_its_trials_named_after_it_the_first_k_at_its_time():
    row = WorkloadJob("hpo-3", 30, "ncf", 1, 32768, trials=12, concurrency=3)
    jobs = jobs_of(row)
    assert [name for name, _ in jobs][:2] == ["hpo-3/trial-01", "hpo-3/trial-02"]
    assert jobs[-1][0] == "hpo-3/trial-12"
    assert [time for _, time in jobs] == [30] * 3 + [WAITING_S] * 9
    assert trial_name("hpo", 7, 100) == "hpo/trial-007"
    assert jobs_of(WorkloadJob("one", 5, "ncf", 1, 32768)) == [("one", 5)]


def test_a_later_trial_starts_from_its_experiments_throughput_model_and_bound_not_its_grad_stats(models):
    """Trials train the same model on the same GPUs: the second starts with the model the first fitted and may take
    twice the most GPUs the first ran on; the first trial and a job of no experiment start from nothing."""
    first, second = (
        SimJobSpec(f"hpo/trial-0{i}", "bert", t, 4, None, experiment="hpo") for i, t in ((1, 0), (2, WAITING_S))
    )
    backend = SimBackend(Cluster(4, 4), [first, SimJobSpec("plain", "bert", 0, 4, None), second], models)
    trial, plain, later = backend.jobs
    assert [(v.name, v.throughput_params, v.max_gpus) for v in backend.job_views(0)] == [
        ("hpo/trial-01", None, 1),
        ("plain", None, 1),
    ]
    plain.reallocate((1, 0, 0, 0), 0, 0)
    for now, allocation in enumerate(((0, 1, 0, 0), (0, 2, 0, 0), (0, 4, 0, 0))):
        trial.reallocate(allocation, now * 60, 0)
        backend.advance(now * 60, 60)
        plain.reallocate((), now * 60 + 60, 0)
    backend.advance(180, 1e6)  # trial-01 finishes, trial-02 takes its slot
    assert trial.done and later.spec.submit_time_s == trial.completion_time_s
    view = {v.name: v for v in backend.job_views(later.spec.submit_time_s)}
    assert view["hpo/trial-02"].throughput_params == trial.params is not None
    assert view["hpo/trial-02"].max_gpus == 8 and view["hpo/trial-02"].grad_stats is None
    assert view["plain"].max_gpus == 2  # it ran on 1 GPU: what trial-01 measured is not its own


@pytest.mark.parametrize("policy", ["fifo", "pollux"])
def test_trials_arrive_only_as_slots_free_at_most_k_in_the_system(models, policy):
    rows = [
        WorkloadJob("hpo", 0, "ncf", 1, 32768, trials=5, concurrency=2),
        WorkloadJob("plain", 0, "ncf", 1, 32768),
    ]
    result = run(rows, policy, models)
    trials = sorted((j for j in result.jobs if j.experiment == "hpo"), key=lambda j: j.name)
    assert len(trials) == 5 and all(j.finish_s is not None for j in trials)
    assert [j.submit_s for j in trials[:2]] == [0, 0]
    finishes = sorted(j.finish_s for j in trials if j.finish_s is not None)
    # the i-th later trial arrives exactly when the i-th trial to finish freed its slot, never before
    assert [j.submit_s for j in trials[2:]] == finishes[:3]
    for job in trials:
        assert job.start_s is not None and job.start_s >= job.submit_s
    events = sorted([(j.submit_s, 1) for j in trials] + [(j.finish_s, -1) for j in trials if j.finish_s is not None])
    in_system = 0
    for _, change in sorted(events, key=lambda e: (e[0], e[1])):  # a finish before the arrival it makes room for
        in_system += change
        assert in_system <= 2
    assert {j.experiment for j in result.jobs} == {"hpo", ""}
    summary = result.experiments["hpo"]
    assert summary["trials"] == summary["trials_finished"] == 5
    assert summary["makespan_s"] == max(finishes) - 0
    assert summary["avg_trial_jct_s"] == pytest.approx(sum(j.jct_s or 0 for j in trials) / 5)


def test_the_static_baseline_holds_four_gpus_at_a_fixed_per_gpu_batch_per_trial(models):
    """The paper's baseline is `fifo` on the row's request: every trial on 4 GPUs, batch 4 × per-GPU batch."""
    per_gpu = 128
    rows = [WorkloadJob("hpo", 0, "cifar10", 4, 4 * per_gpu, trials=3, concurrency=2)]
    result = run(rows, "fifo", models, Cluster(4, 4))
    assert len(result.job_timelines) == 3
    for name, track in result.job_timelines.items():
        held = [(gpus, batch) for _, gpus, batch in track if gpus]
        assert held == [(4, 4 * per_gpu)], name  # from its start to its finish, never resized or rebatched
    assert all(j.restarts == 0 for j in result.jobs)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ("0,1", "field 'trials': expected an integer >= 1, got 0"),
        ("4,0", "field 'concurrency': expected an integer >= 1, got 0"),
        ("4,5", "field 'concurrency': expected an integer from 1 to trials (4), got 5"),
        ("2.5,1", "field 'trials': expected an integer >= 1, got '2.5'"),
        ("4,two", "field 'concurrency': expected an integer >= 1, got 'two'"),
        ("4,", "field 'concurrency': expected an integer from 1 to trials (4) beside it"),
        (",2", "field 'trials': expected an integer >= 1 beside concurrency 2"),
    ],
)
def test_bad_trials_or_concurrency_are_refused_naming_the_row_and_field(tmp_path: Path, fields, message):
    path = tmp_path / "hpo.csv"
    path.write_text(HEADER + "plain,0,ncf,1,32768,,\n" + f"hpo,0,cifar10,4,512,{fields}\n")
    with pytest.raises(TraceError) as error:
        read_workload(path)
    assert str(error.value).startswith(f"{path}:3: {message}")
    assert "\n" not in str(error.value)


def test_rows_built_in_code_are_checked_too_and_trials_may_not_take_a_jobs_name(models):
    with pytest.raises(SpecError, match=r"^job hpo: field 'concurrency': expected an integer from 1 to trials \(2\)"):
        check_workload_fits([WorkloadJob("hpo", 0, "ncf", 1, 32768, trials=2, concurrency=3)], models, CLUSTER)
    clash = [
        WorkloadJob("hpo", 0, "ncf", 1, 32768, trials=2, concurrency=1),
        WorkloadJob("hpo/trial-02", 0, "ncf", 1, 1),
    ]
    with pytest.raises(SpecError, match=r"^job hpo/trial-02: named twice"):
        check_workload_fits(clash, models, CLUSTER)


def test_experiment_columns_round_trip_and_a_workload_without_them_is_written_as_before(tmp_path: Path):
    rows = (WorkloadJob("hpo", 0, "cifar10", 4, 512, trials=100, concurrency=4), WorkloadJob("plain", 5, "ncf", 1, 32))
    path = write_workload(Workload("w", rows), tmp_path / "w.csv")
    assert path.read_text().splitlines() == [HEADER.strip(), "hpo,0,cifar10,4,512,100,4", "plain,5,ncf,1,32,,"]
    assert read_workload(path).jobs == rows
    plain = write_workload(Workload("p", rows[1:]), tmp_path / "p.csv")
    assert plain.read_text().splitlines()[0] == "name,time,application,num_replicas,batch_size"


def test_summary_csv_table_and_report_give_each_experiments_makespan_beside_its_trials_jct(models):
    rows = [WorkloadJob("hpo", 0, "ncf", 1, 32768, trials=4, concurrency=2), WorkloadJob("solo", 0, "ncf", 1, 32768)]
    result = run(rows, "fifo", models, Cluster(1, 2))
    summary = json.loads(json.dumps(summary_json([result])))["fifo"]["experiments"]["hpo"]  # as summary.json holds it
    assert summary["trials"] == 4 and summary["makespan_s"] >= summary["avg_trial_jct_s"] > 0
    named = [(row["name"], row["experiment"]) for row in (job.as_row() for job in result.jobs)]  # jobs-fifo.csv
    assert named[:2] == [("hpo/trial-01", "hpo"), ("hpo/trial-02", "hpo")] and ("solo", "") in named
    console = Console(width=200, record=True)
    console.print(group_table([result], "experiment"))
    printed = console.export_text()
    assert "avg trial JCT h" in printed and "makespan h" in printed and "hpo" in printed
    report = report_data([result], "hpo", CLUSTER.num_gpus)["experiments"]  # what report.html's table shows
    assert [(row["policy"], row["experiment"], row["cells"][0]) for row in report["rows"]] == [("fifo", "hpo", "4")]
