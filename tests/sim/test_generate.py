"""The workload generator follows the artifact's recipe, from the trace or from the committed summary, by seed."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pollux.data import locate
from pollux.errors import DataNotFoundError, SpecError, TraceError
from pollux.sim.generate import (
    BUCKET_APPLICATIONS,
    SUMMARY_PATH,
    build_summary,
    generate_workload,
    gpu_time_bucket,
    load_summary,
    read_philly_trace,
    tuned_configurations,
    tuned_configurations_from_workloads,
)
from pollux.sim.workload import Workload, WorkloadJob, read_workload
from pollux.sim.workload_cli import app

HOUR = 3600
# One kept job per 10 s from hour 2 on, GPU-time cycling through the four buckets; the filtered-out jobs sit on the
# odd 5 s marks, and more kept jobs outside the window (hour 12), so a generated time tells which row it came from.
BUCKET_GPU_TIME_S = (600.0, 7200.0, 72000.0, 720000.0)
KEPT_IN_WINDOW = 2000


def _stamp(second_of_day: int, day: int = 9) -> str:
    hours, rest = divmod(second_of_day, HOUR)
    return f"2017-10-{day:02d} {hours:02d}:{rest // 60:02d}:{rest % 60:02d}"


@pytest.fixture
def trace_dir(tmp_path: Path) -> Path:
    """A data folder whose philly-jobs.csv has jobs with known submission seconds and GPU-time buckets."""
    root = tmp_path / "pollux-osdi21"
    (root / "profiles").mkdir(parents=True)
    rows = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    for index in range(KEPT_IN_WINDOW):
        gpu_time = BUCKET_GPU_TIME_S[index % 4]
        rows.append(f"{_stamp(2 * HOUR + 10 * index)},{gpu_time / 2},2,{gpu_time},c1")
        too_short = index % 2 == 0
        rows.append(
            f"{_stamp(2 * HOUR + 10 * index + 5)},{30.0 if too_short else 4e6},1,{30.0 if too_short else 4e6},c1"
        )
        rows.append(f"{_stamp(12 * HOUR + 10 * index, day=10)},600.0,1,600.0,c2")
    (root / "philly-jobs.csv").write_text("\n".join(rows) + "\n\n", encoding="utf-8")
    return root


def _signature(workload: Workload) -> list[tuple]:
    return [(job.name, job.submit_time_s, job.application, job.num_replicas, job.batch_size) for job in workload.jobs]


def test_trace_jobs_keep_their_second_in_the_window_and_get_their_buckets_application(trace_dir: Path):
    workload = generate_workload(400, 8, seed=3, data_dir=trace_dir)
    assert workload.source == (trace_dir / "philly-jobs.csv").resolve()
    assert len({job.submit_time_s for job in workload.jobs}) == 400  # without replacement
    for job in workload.jobs:
        assert job.submit_time_s % 10 == 0, "a filtered-out job (too short or too big) was sampled"
        assert 0 <= job.submit_time_s < 8 * HOUR
        bucket = (job.submit_time_s // 10) % 4
        assert job.application in BUCKET_APPLICATIONS[bucket]
        assert (job.num_replicas, job.batch_size) in tuned_configurations(job.application)


def test_each_two_way_bucket_uses_both_applications_about_equally(trace_dir: Path):
    mix = Counter(job.application for job in generate_workload(2000, 8, seed=0, data_dir=trace_dir).jobs)
    for first, second in BUCKET_APPLICATIONS[:2]:
        assert abs(mix[first] - mix[second]) < 0.2 * (mix[first] + mix[second])
    assert mix["yolov3"] == mix["imagenet"] == 500


def test_the_window_moves_with_the_start_hour(trace_dir: Path):
    workload = generate_workload(50, 1, seed=1, data_dir=trace_dir, start_hour=12)
    assert all(job.submit_time_s < HOUR and job.application in ("cifar10", "ncf") for job in workload.jobs)


def test_names_follow_submission_order():
    workload = generate_workload(100, 8, seed=5, source="summary")
    assert [job.name for job in workload.jobs] == [f"{job.application}-{i}" for i, job in enumerate(workload.jobs)]
    times = [job.submit_time_s for job in workload.jobs]
    assert times == sorted(times)


@pytest.mark.parametrize("source", ["trace", "summary"])
def test_same_seed_same_workload_other_seed_other_workload(trace_dir: Path, source: str):
    first = generate_workload(160, 8, seed=11, data_dir=trace_dir, source=source)
    again = generate_workload(160, 8, seed=11, data_dir=trace_dir, source=source)
    other = generate_workload(160, 8, seed=12, data_dir=trace_dir, source=source)
    assert _signature(first) == _signature(again)
    assert _signature(first) != _signature(other)


@pytest.mark.parametrize("source", ["trace", "summary"])
@pytest.mark.parametrize("hours", [0.5, 3, 8, 24])
def test_times_lie_in_the_window(trace_dir: Path, source: str, hours: float):
    if source == "trace" and hours == 24:
        hours = 23  # the synthetic trace has 2000 kept jobs in the window, enough for every length
    workload = generate_workload(150, hours, seed=2, data_dir=trace_dir, source=source)
    assert all(0 <= job.submit_time_s < hours * HOUR for job in workload.jobs)


@pytest.mark.parametrize(("load", "count"), [(0.5, 80), (1.0, 160), (1.5, 240), (2.0, 320)])
def test_load_scales_the_number_of_jobs(trace_dir: Path, load: float, count: int):
    assert len(generate_workload(160, 8, seed=0, load=load, data_dir=trace_dir)) == count
    assert len(generate_workload(160, 8, seed=0, load=load, source="summary")) == count


def test_without_data_the_committed_summary_is_used(tmp_path: Path):
    workload = generate_workload(160, 8, seed=4, data_dir=tmp_path / "empty")
    assert workload.source == SUMMARY_PATH
    assert len(workload) == 160
    assert all(0 <= job.submit_time_s < 8 * HOUR for job in workload.jobs)
    assert {job.application for job in workload.jobs} <= {app for apps in BUCKET_APPLICATIONS for app in apps}


def test_summary_mix_follows_the_windows_gpu_time_buckets():
    counts = load_summary().jobs_by_hour_and_bucket[2:10]
    expected = counts.sum(axis=0) / counts.sum()
    jobs = generate_workload(4000, 8, seed=7, source="summary").jobs
    observed = np.array([sum(job.application in apps for job in jobs) for apps in BUCKET_APPLICATIONS]) / len(jobs)
    tolerance = 3 * np.sqrt(expected * (1 - expected) / len(jobs)) + 1e-3
    assert np.all(np.abs(observed - expected) < tolerance), (observed, expected)


def test_summary_arrivals_follow_the_hourly_histogram():
    counts = load_summary().jobs_by_hour_and_bucket.sum(axis=1)[2:10]
    expected = counts / counts.sum()
    times = np.array([job.submit_time_s for job in generate_workload(4000, 8, seed=8, source="summary").jobs])
    observed = np.bincount(times // HOUR, minlength=8) / times.size
    assert np.all(np.abs(observed - expected) < 3 * np.sqrt(expected / times.size) + 1e-3), (observed, expected)


def test_injected_configurations_are_the_only_requests(trace_dir: Path):
    offered = {"cifar10": [(2, 256)], "ncf": [(1, 512), (3, 768)], "deepspeech2": [(4, 80)], "bert": [(1, 12)]}
    offered |= {"yolov3": [(8, 64)], "imagenet": [(16, 3200)]}
    workload = generate_workload(300, 8, seed=1, data_dir=trace_dir, configs=lambda app: offered[app])
    assert all((job.num_replicas, job.batch_size) in offered[job.application] for job in workload.jobs)
    assert {(job.num_replicas, job.batch_size) for job in workload.jobs if job.application == "ncf"} == set(
        offered["ncf"]
    )


def test_an_empty_configuration_list_is_refused_by_application(trace_dir: Path):
    with pytest.raises(SpecError, match="'cifar10'"):
        generate_workload(50, 8, seed=1, data_dir=trace_dir, configs=lambda app: [] if app == "cifar10" else [(1, 1)])


def test_default_configurations_cover_every_application():
    for applications in BUCKET_APPLICATIONS:
        for application in applications:
            assert tuned_configurations(application)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"num_jobs": 0}, "--jobs"),
        ({"load": 0.0}, "--load"),
        ({"load": float("nan")}, "--load"),
        ({"hours": 25}, "--hours"),
        ({"hours": 0}, "--hours"),
        ({"start_hour": 24}, "start hour"),
        ({"num_jobs": 2001}, "only 2000 kept jobs"),
    ],
)
def test_impossible_requests_say_what_to_change(trace_dir: Path, kwargs: dict, fragment: str):
    arguments = {"num_jobs": 100, "hours": 8, "seed": 0, "data_dir": trace_dir} | kwargs
    with pytest.raises(SpecError, match=fragment):
        generate_workload(**arguments)


def test_asking_for_the_trace_without_one_says_so(tmp_path: Path):
    with pytest.raises(DataNotFoundError):
        generate_workload(10, 8, seed=0, data_dir=tmp_path / "empty", source="trace")


def test_a_malformed_trace_row_names_file_line_and_field(tmp_path: Path):
    path = tmp_path / "philly-jobs.csv"
    path.write_text("timestamp,duration,num_gpus,gpu_time\n2017-10-09 07:01:55,66,1,66\n2017-10-09 7:1,66,1,66\n")
    with pytest.raises(TraceError, match=re.escape(f"{path}:3: field 'timestamp'")):
        read_philly_trace(path)
    path.write_text("timestamp,duration,num_gpus,gpu_time\n2017-10-09 07:01:55,-3,1,66\n")
    with pytest.raises(TraceError, match=re.escape(f"{path}:2: field 'duration'")):
        read_philly_trace(path)


def test_gpu_time_buckets_have_strict_upper_edges():
    assert gpu_time_bucket(np.array([0, 3599, 3600, 35999, 36000, 359999, 360000])).tolist() == [0, 0, 1, 1, 2, 2, 3]


def test_tuned_configurations_are_the_distinct_requests_per_application():
    jobs = (WorkloadJob("a", 0, "ncf", 1, 8), WorkloadJob("b", 1, "ncf", 1, 8), WorkloadJob("c", 2, "bert", 4, 96))
    more = (WorkloadJob("d", 0, "ncf", 2, 16),)
    assert tuned_configurations_from_workloads([Workload("x", jobs), Workload("y", more)]) == {
        "bert": [[4, 96]],
        "ncf": [[1, 8], [2, 16]],
    }


def test_cli_generate_writes_the_csv_and_says_from_what(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        app, ["generate", "--jobs", "20", "--hours", "4", "--seed", "1", "--data-dir", str(tmp_path / "none")]
    )
    assert result.exit_code == 0, result.output
    assert "generated-20jobs-4h-seed1.csv" in result.output and "committed Philly summary" in result.output
    assert len(read_workload(tmp_path / "generated-20jobs-4h-seed1.csv")) == 20


def test_cli_generate_from_the_trace_doubles_with_load(trace_dir: Path, tmp_path: Path):
    out = tmp_path / "w.csv"
    arguments = ["generate", "-n", "20", "--hours", "8", "--seed", "1", "--load", "2", "--data-dir", str(trace_dir)]
    result = CliRunner().invoke(app, [*arguments, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "Philly trace" in result.output
    assert len(read_workload(out)) == 40


@pytest.mark.parametrize(
    "arguments",
    [
        ["generate", "--jobs", "5", "--hours", "30", "--seed", "1"],
        ["generate", "--jobs", "5", "--hours", "8", "--seed", "1", "--source", "trace", "--data-dir", "/nonexistent"],
        ["show", "/nonexistent/w.csv"],
    ],
)
def test_cli_errors_are_one_line_and_exit_2(arguments: list[str]):
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and result.output.startswith("error: ")


def test_cli_show_reports_a_bad_row_by_line(tmp_path: Path):
    path = tmp_path / "w.csv"
    path.write_text("name,time,application,num_replicas,batch_size\na,-1,ncf,1,1\n")
    result = CliRunner().invoke(app, ["show", str(path)])
    assert result.exit_code == 2 and f"{path}:2: field 'time'" in result.output


def _real_data() -> Path:
    if not (locate.SHARED_DATA_DIR / "philly-jobs.csv").is_file():
        pytest.skip(f"needs the real data at {locate.SHARED_DATA_DIR}")
    return locate.SHARED_DATA_DIR


def test_the_committed_summary_is_what_the_script_derives_from_the_data():
    assert build_summary(_real_data()) == json.loads(SUMMARY_PATH.read_text())


def test_real_trace_workloads_have_the_artifacts_job_mix():
    data_dir = _real_data()
    published = [read_workload(f"workload-{i}", data_dir) for i in range(1, 5)]
    generated = [generate_workload(160, 8, seed=seed, data_dir=data_dir) for seed in range(8)]

    def short_share(workloads: list[Workload]) -> float:
        jobs = [job for workload in workloads for job in workload.jobs]
        return sum(job.application in BUCKET_APPLICATIONS[0] for job in jobs) / len(jobs)

    assert abs(short_share(generated) - short_share(published)) < 0.05
    assert all(job.submit_time_s < 8 * HOUR for workload in generated for job in workload.jobs)
