"""Workload CSVs: read by path or artifact name, and every bad input is refused naming file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from pollux.data import locate
from pollux.errors import DataNotFoundError, TraceError
from pollux.sim.workload import (
    Workload,
    WorkloadJob,
    artifact_workload_names,
    read_workload,
    workload_artifact,
    write_workload,
)

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
    pytest.param(HEADER + "a,1.5s,cifar10,1,128\n", 2, "'time'", id="time-not-a-number"),
    pytest.param(HEADER + "a,1.0,cifar10,1,128\nb,-2.25,cifar10,1,128\n", 3, "'time'", id="time-negative-fraction"),
    pytest.param(HEADER + "a,inf,cifar10,1,128\n", 2, "'time'", id="time-infinite"),
    pytest.param(HEADER + "a,1,cifar10,1.5,128\n", 2, "'num_replicas'", id="replicas-not-whole"),
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


# ---- the Sia artifact's workloads: philly/workload-N, saturn/workload-N ------------------------------------------


@pytest.fixture
def sia_dir(tmp_path: Path) -> Path:
    """A Sia data folder with a few workloads, times written as Sia's Helios traces write them."""
    root = tmp_path / "sia-sosp23"
    (root / "profiles").mkdir(parents=True)
    _write(root / "workloads/philly/workload-3.csv", HEADER + "cifar10-0,791,cifar10,6,2048\n")
    for n in (1, 7, 10):
        _write(
            root / f"workloads/saturn/workload-{n}.csv",
            HEADER + "bert-1,345.0,bert,2,24\ncifar10-0,225.0,cifar10,8,2048\n",
        )
    return root


@pytest.mark.parametrize(
    ("spec", "artifact"),
    [
        ("philly/workload-3", "sia-sosp23"),
        ("saturn/workload-7.csv", "sia-sosp23"),
        ("workload-1", "pollux-osdi21"),
        ("workloads-2.0/workload-3", "pollux-osdi21"),
        ("helios/workload-1", None),
        ("my-trace.csv", None),
    ],
)
def test_a_workload_name_says_which_artifact_it_belongs_to(spec: str, artifact: str | None):
    assert workload_artifact(spec) == artifact


def test_an_existing_file_belongs_to_no_artifact_whatever_its_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "philly" / "workload-3.csv", HEADER + "a,3,cifar10,2,256\n")
    assert workload_artifact("philly/workload-3.csv") is None
    assert read_workload("philly/workload-3.csv").source == (tmp_path / "philly" / "workload-3.csv").resolve()


@pytest.mark.parametrize(
    ("spec", "name", "first", "time"),
    [
        ("philly/workload-3", "philly/workload-3", "cifar10-0", 791),
        ("saturn/workload-7", "saturn/workload-7", "cifar10-0", 225),
        ("saturn/workload-10.csv", "saturn/workload-10", "cifar10-0", 225),
    ],
)
def test_sia_names_resolve_in_the_sia_data_folder(sia_dir: Path, spec: str, name: str, first: str, time: int):
    workload = read_workload(spec, sia_dir, applications=APPLICATIONS)
    assert workload.name == name
    assert workload.source == (sia_dir / "workloads" / f"{name}.csv").resolve()
    assert (workload.jobs[0].name, workload.jobs[0].submit_time_s) == (first, time)


def test_an_unknown_sia_name_lists_the_known_ones_in_order(sia_dir: Path):
    with pytest.raises(TraceError) as caught:
        read_workload("philly/workload-9", sia_dir)
    message = str(caught.value)
    assert "philly/workload-9.csv: no sia-sosp23 workload 'philly/workload-9'" in message
    assert "known: philly/workload-3, saturn/workload-1, saturn/workload-7, saturn/workload-10" in message
    assert artifact_workload_names(sia_dir, "sia-sosp23")[-1] == "saturn/workload-10"


def test_a_sia_name_without_sia_data_names_its_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("POLLUX_SIA_DATA_DIR", raising=False)
    monkeypatch.setattr(locate, "SIA_SHARED_DATA_DIR", tmp_path / "absent")
    monkeypatch.setenv("POLLUX_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(DataNotFoundError) as caught:
        read_workload("saturn/workload-7")
    assert "artifact name" in str(caught.value)
    assert "POLLUX_SIA_DATA_DIR" in str(caught.value)


def test_a_malformed_sia_row_names_file_line_and_field(sia_dir: Path):
    path = sia_dir / "workloads/saturn/workload-7.csv"
    path.write_text(HEADER + "bert-1,345.0,bert,2,24\ncifar10-0,-225.5,cifar10,8,2048\n")
    with pytest.raises(TraceError) as caught:
        read_workload("saturn/workload-7", sia_dir)
    expected = "expected non-negative seconds (e.g. 487 or 487.66), got '-225.5'"
    assert str(caught.value) == f"{path}:3: field 'time': {expected}"


def test_the_real_sia_workloads_read_with_their_published_sizes():
    if not locate.looks_like_data(locate.SIA_SHARED_DATA_DIR):
        pytest.skip(f"needs the real data at {locate.SIA_SHARED_DATA_DIR}")
    names = artifact_workload_names(locate.SIA_SHARED_DATA_DIR, "sia-sosp23")[:18]
    assert names == (*(f"philly/workload-{n}" for n in range(1, 9)), *(f"saturn/workload-{n}" for n in range(1, 11)))
    for spec in names:
        workload = read_workload(spec, applications=APPLICATIONS)
        assert len(workload) == 160
        times = [job.submit_time_s for job in workload.jobs]
        assert times == sorted(times)
        assert times[0] >= 0 and times[-1] < 8 * 3600
        assert {job.application for job in workload.jobs} <= {"bert", "cifar10", "deepspeech2", "imagenet", "yolov3"}


# ---- Sia's scale and arrival-rate workloads (Figures 7 and 9): `rate_30/workload-4`, `scale_32x/workload-1` -------


@pytest.fixture
def sia_scale_beside(sia_dir: Path) -> Path:
    """`sia_dir` with scale and rate workloads beside it, as ../shared/data keeps them (`sia-sosp23-scale/`)."""
    beside = sia_dir.parent / "sia-sosp23-scale" / "workloads"
    for folder in ("rate_10", "scale_2x", "scale_16x"):
        for n in (1, 2, 10):
            _write(beside / folder / f"workload-{n}.csv", HEADER + "cifar10-0,401.0,cifar10,12,4096\n")
    return beside


@pytest.mark.parametrize("spec", ["rate_10/workload-2", "scale_16x/workload-10", "scale_2x/workload-1.csv"])
def test_scale_and_rate_names_belong_to_the_sia_artifact_and_read_beside_it(sia_scale_beside: Path, spec: str):
    assert workload_artifact(spec) == "sia-sosp23"
    workload = read_workload(spec, sia_scale_beside.parent.parent / "sia-sosp23")
    assert workload.name == spec.removesuffix(".csv")
    assert workload.source == (sia_scale_beside / f"{workload.name}.csv").resolve()
    assert workload.jobs[0].submit_time_s == 401


def test_scale_workloads_inside_the_sia_folder_win(sia_dir: Path, sia_scale_beside: Path):
    inside = _write(sia_dir / "workloads/scale/scale_2x/workload-1.csv", HEADER + "bert-0,5,bert,1,24\n")
    assert read_workload("scale_2x/workload-1", sia_dir).source == inside.resolve()


def test_sia_names_list_traces_then_rates_then_scales_in_natural_order(sia_dir: Path, sia_scale_beside: Path):
    names = artifact_workload_names(sia_dir, "sia-sosp23")
    assert names[:4] == ("philly/workload-3", "saturn/workload-1", "saturn/workload-7", "saturn/workload-10")
    assert names[4:] == tuple(f"{s}/workload-{n}" for s in ("rate_10", "scale_2x", "scale_16x") for n in (1, 2, 10))


def test_an_unknown_scale_name_lists_the_known_sets_in_one_line(sia_dir: Path, sia_scale_beside: Path):
    with pytest.raises(TraceError) as caught:
        read_workload("scale_64x/workload-1", sia_dir)
    message = str(caught.value)
    assert "\n" not in message
    assert "scale_64x/workload-1.csv: no sia-sosp23 workload 'scale_64x/workload-1'" in message
    assert "known: philly/workload-3, saturn/workload-1, saturn/workload-7, saturn/workload-10, " in message
    assert message.endswith(
        "scale_2x/workload-1..2, scale_2x/workload-10, scale_16x/workload-1..2, scale_16x/workload-10"
    )


def test_the_real_scale_and_rate_workloads_have_their_published_sizes():
    if not locate.looks_like_data(locate.SIA_SHARED_DATA_DIR):
        pytest.skip(f"needs the real data at {locate.SIA_SHARED_DATA_DIR}")
    names = artifact_workload_names(locate.SIA_SHARED_DATA_DIR, "sia-sosp23")
    assert len(names) == 18 + 100
    for rate in (10, 30, 50):
        assert len(read_workload(f"rate_{rate}/workload-4", applications=APPLICATIONS)) == 8 * rate  # jobs/h × 8 h
    for factor in (2, 32):
        workload = read_workload(f"scale_{factor}x/workload-1", applications=APPLICATIONS)
        assert len(workload) == 160 * factor  # Helios' 160 jobs, each issued k times
        assert workload.source is not None and workload.source.parent.name == f"scale_{factor}x"
