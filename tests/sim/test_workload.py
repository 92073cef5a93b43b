"""Workload CSVs: read by path or artifact name, and every bad input is refused naming file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from pollux.data import locate
from pollux.errors import DataNotFoundError, TraceError
from pollux.sim.workload import Workload, WorkloadJob, artifact_workload_names, read_workload, write_workload

HEADER = "name,time,application,num_replicas,batch_size\n"
APPLICATIONS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data folder in the artifact's layout, with one small workload per naming form."""
    root = tmp_path / "pollux-osdi21"
    (root / "profiles").mkdir(parents=True)
    _write(root / "workloads/workloads/workload-1.csv", HEADER + "cifar10-0,10,cifar10,6,2048\nncf-1,20,ncf,1,32768\n")
    _write(root / "workloads/workloads-2.0/workload-3.csv", HEADER + "bert-0,5,bert,12,384\n")
    _write(root / "workloads/workloads-realistic/workload-2.csv", HEADER + "yolov3-0,7,yolov3,1,8\n")
    return root


@pytest.mark.parametrize(
    ("spec", "name", "relative", "first"),
    [
        ("workload-1", "workload-1", "workloads/workloads/workload-1.csv", "cifar10-0"),
        ("workloads/workload-1", "workload-1", "workloads/workloads/workload-1.csv", "cifar10-0"),
        ("workloads-2.0/workload-3", "workloads-2.0/workload-3", "workloads/workloads-2.0/workload-3.csv", "bert-0"),
        (
            "workloads-realistic/workload-2",
            "workloads-realistic/workload-2",
            "workloads/workloads-realistic/workload-2.csv",
            "yolov3-0",
        ),
    ],
)
def test_artifact_names_resolve_in_the_data_folder(data_dir: Path, spec: str, name: str, relative: str, first: str):
    workload = read_workload(spec, data_dir, applications=APPLICATIONS)
    assert workload.name == name
    assert workload.source == (data_dir / relative).resolve()
    assert workload.jobs[0].name == first


def test_a_path_reads_the_file_it_names(tmp_path: Path):
    path = _write(tmp_path / "mine.csv", HEADER + "a,3,cifar10,2,256\n")
    workload = read_workload(path)
    assert workload == Workload("mine", (WorkloadJob("a", 3, "cifar10", 2, 256),), path.resolve())


def test_the_real_artifact_workloads_read_with_their_published_sizes():
    if not locate.looks_like_data(locate.SHARED_DATA_DIR):
        pytest.skip(f"needs the real data at {locate.SHARED_DATA_DIR}")
    sizes = {"workload-1": 160, "workloads-0.5/workload-2": 80, "workloads-2.0/workload-4": 320}
    for spec, size in sizes.items():
        workload = read_workload(spec, locate.SHARED_DATA_DIR, applications=APPLICATIONS)
        assert len(workload) == size
        times = [job.submit_time_s for job in workload.jobs]
        assert times == sorted(times)
        assert times[0] >= 0 and times[-1] < 8 * 3600


def test_an_unknown_artifact_name_lists_the_known_ones(data_dir: Path):
    with pytest.raises(TraceError) as caught:
        read_workload("workloads-3.0/workload-1", data_dir)
    message = str(caught.value)
    assert "workloads-3.0/workload-1.csv" in message
    assert "workload-1, workloads-2.0/workload-3, workloads-realistic/workload-2" in message
    assert artifact_workload_names(data_dir) == (
        "workload-1",
        "workloads-2.0/workload-3",
        "workloads-realistic/workload-2",
    )


def test_an_artifact_name_without_data_says_what_to_set(tmp_path: Path):
    with pytest.raises(DataNotFoundError, match="artifact name"):
        read_workload("workload-1", tmp_path / "empty")


def test_a_missing_file_is_named(tmp_path: Path):
    missing = tmp_path / "nowhere" / "jobs.csv"
    with pytest.raises(TraceError) as caught:
        read_workload(missing)
    assert str(caught.value).startswith(f"{missing}: workload file not found")


BAD_INPUTS = [
    pytest.param("name,time,application,num_replicas\na,1,cifar10,1\n", 1, "batch_size", id="missing-column"),
    pytest.param(HEADER + "a,1,cifar10,1,128\nb,2,cifar10,1\n", 3, "batch_size", id="too-few-fields"),
    pytest.param(HEADER + "a,1,cifar10,1,128,9\n", 2, "extra field", id="too-many-fields"),
    pytest.param(HEADER + "a,1.5,cifar10,1,128\n", 2, "'time'", id="time-not-integer"),
    pytest.param(HEADER + "a,1,cifar10,two,128\n", 2, "'num_replicas'", id="replicas-not-integer"),
    pytest.param(HEADER + "a,1,cifar10,1,\n", 2, "'batch_size'", id="batch-empty"),
    pytest.param(HEADER + "a,1,cifar10,1,128\nb,-5,cifar10,1,128\n", 3, "'time'", id="negative-time"),
    pytest.param(HEADER + "a,1,cifar10,0,128\n", 2, "'num_replicas'", id="zero-replicas"),
    pytest.param(HEADER + "a,1,cifar10,1,0\n", 2, "'batch_size'", id="zero-batch"),
    pytest.param(HEADER + "a,1,resnet9000,1,128\n", 2, "'application'", id="unknown-application"),
    pytest.param(HEADER + "a,1,,1,128\n", 2, "'application'", id="empty-application"),
    pytest.param(HEADER + ",1,cifar10,1,128\n", 2, "'name'", id="empty-name"),
    pytest.param(HEADER + "a,1,cifar10,1,128\n\na,2,ncf,1,256\n", 4, "'name'", id="duplicate-name"),
    pytest.param(HEADER, 2, "no jobs", id="header-only"),
    pytest.param("", 1, "header", id="empty-file"),
]


@pytest.mark.parametrize(("text", "line", "field"), BAD_INPUTS)
def test_bad_input_names_file_line_and_field(tmp_path: Path, text: str, line: int, field: str):
    path = _write(tmp_path / "bad.csv", text)
    with pytest.raises(TraceError) as caught:
        read_workload(path, applications=APPLICATIONS)
    message = str(caught.value)
    assert f"{path}:{line}:" in message
    assert field in message


def test_unknown_application_lists_the_known_ones(tmp_path: Path):
    path = _write(tmp_path / "bad.csv", HEADER + "a,1,resnet9000,1,128\n")
    with pytest.raises(TraceError, match="known: bert, cifar10, deepspeech2, imagenet, ncf, yolov3"):
        read_workload(path, applications=APPLICATIONS)


def test_without_an_application_list_any_name_is_accepted(tmp_path: Path):
    path = _write(tmp_path / "custom.csv", HEADER + "a,1,my-transformer,8,512\n")
    assert read_workload(path).jobs[0].application == "my-transformer"


def test_jobs_come_in_submission_order_with_file_order_breaking_ties(tmp_path: Path):
    path = _write(tmp_path / "w.csv", HEADER + "late,50,ncf,1,1\nfirst,10,ncf,1,1\nsecond,10,ncf,1,1\n")
    assert [job.name for job in read_workload(path).jobs] == ["first", "second", "late"]


def test_written_workloads_read_back_identical_in_the_same_schema(tmp_path: Path):
    jobs = (WorkloadJob("b-1", 9, "bert", 6, 384), WorkloadJob("c-0", 0, "cifar10", 16, 4096))
    path = write_workload(Workload("w", jobs), tmp_path / "out" / "w.csv")
    assert path.read_text().splitlines()[:2] == [HEADER.strip(), "c-0,0,cifar10,16,4096"]
    assert read_workload(path).jobs == Workload("w", jobs).jobs
