"""Workloads with tenants: Philly's virtual clusters as tenants with guarantees by GPU-time share, and `flood`."""

from __future__ import annotations

import csv
import hashlib
import math
import tomllib
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pollux.cluster import Cluster
from pollux.cluster_spec import PRESETS
from pollux.data import locate
from pollux.errors import SpecError
from pollux.sim.generate import generate_workload
from pollux.sim.tenant_workloads import (
    FLOOD_SPAN_S,
    flood_workload,
    philly_vc_workload,
    requests_up_to,
    tenants_toml,
)
from pollux.sim.workload import COLUMNS
from pollux.sim.workload_cli import app
from pollux.tenants import parse_tenants

HOUR = 3600
# One kept job per 10 s from hour 2 on: its VC and GPU-time follow its index, so a job's submission second tells
# which trace row (and VC) it was sampled from. `big` holds ~80% of the GPU-time, `mid` ~20%, `tiny` ~0.2%.
VC_OF_INDEX = ("big",) * 6 + ("mid",) * 3 + ("tiny",)
GPU_TIME_OF_VC = {"big": 7200.0, "mid": 3600.0, "tiny": 120.0}
ROWS = 1500
HETEROGENEOUS = PRESETS["sia-heterogeneous"]


def _stamp(second_of_day: int) -> str:
    hours, rest = divmod(second_of_day, HOUR)
    return f"2017-10-09 {hours:02d}:{rest // 60:02d}:{rest % 60:02d}"


def _trace_dir(tmp_path: Path, vc_of_index: tuple[str, ...] = VC_OF_INDEX, with_vc: bool = True) -> Path:
    root = tmp_path / "pollux-osdi21"
    (root / "profiles").mkdir(parents=True)
    rows = ["timestamp,duration,num_gpus,gpu_time" + (",cluster" if with_vc else "")]
    for index in range(ROWS):
        vc = vc_of_index[index % len(vc_of_index)]
        gpu_time = GPU_TIME_OF_VC.get(vc, 600.0)
        rows.append(f"{_stamp(2 * HOUR + 10 * index)},{gpu_time / 2},2,{gpu_time}" + (f",{vc}" if with_vc else ""))
    (root / "philly-jobs.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root


@pytest.fixture
def trace_dir(tmp_path: Path) -> Path:
    return _trace_dir(tmp_path)


def _vc_of_time(time_s: float) -> str:
    return VC_OF_INDEX[int(time_s) // 10 % len(VC_OF_INDEX)]


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _generate(trace_dir: Path, out: Path, *extra: str):
    arguments = ["generate", "-n", "300", "--hours", "4", "--seed", "3", "--data-dir", str(trace_dir)]
    return CliRunner().invoke(app, [*arguments, "--out", str(out), *extra])


def test_each_jobs_tenant_is_the_vc_of_the_trace_job_it_was_sampled_from(trace_dir: Path, tmp_path: Path):
    result = _generate(trace_dir, tmp_path / "w.csv", "--tenants", "philly")
    assert result.exit_code == 0, result.output
    rows = _rows(tmp_path / "w.csv")
    assert list(rows[0]) == [*COLUMNS, "tenant"]
    assert len(rows) == 300
    assert all(row["tenant"] == _vc_of_time(float(row["time"])) for row in rows)
    assert {row["tenant"] for row in rows} == {"big", "mid", "tiny"}


def test_tenants_keep_the_plain_generators_jobs(trace_dir: Path, tmp_path: Path):
    assert _generate(trace_dir, tmp_path / "plain.csv").exit_code == 0
    assert _generate(trace_dir, tmp_path / "vc.csv", "--tenants", "philly").exit_code == 0
    plain = (tmp_path / "plain.csv").read_text().splitlines()
    with_tenants = (tmp_path / "vc.csv").read_text().splitlines()
    assert plain[0] == ",".join(COLUMNS)  # no tenant column without --tenants
    assert [line.rsplit(",", 1)[0] for line in with_tenants] == plain
    assert not (tmp_path / "plain.tenants.toml").exists()


@pytest.mark.parametrize("cluster", [Cluster(16, 4), HETEROGENEOUS], ids=["16x4-aws", "sia-heterogeneous"])
def test_guarantees_are_the_floor_of_each_vcs_gpu_time_share_of_every_type(trace_dir: Path, cluster: Cluster):
    chosen = philly_vc_workload(300, 4, seed=5, cluster=cluster, data_dir=trace_dir)
    gpu_time = Counter()
    for job in chosen.workload.jobs:
        gpu_time[_vc_of_time(job.submit_time_s)] += GPU_TIME_OF_VC[_vc_of_time(job.submit_time_s)]
    total = sum(gpu_time.values())
    tenants = parse_tenants(tomllib.loads(tenants_toml(chosen.tenants, chosen.about)), cluster)
    assert tenants.names[0] == "big"  # the largest share first, and the largest guarantee
    for gpu_type in cluster.gpu_types:
        capacity = cluster.gpus_of_type(gpu_type)
        assert sum(t.guarantee_on(gpu_type) for t in tenants.tenants) <= capacity
        for tenant in tenants.tenants:
            assert tenant.guarantee_on(gpu_type) == math.floor(gpu_time[tenant.name] / total * capacity)
            assert tenant.weight == 1.0 and tenant.borrow
        assert tenants.get("big").guarantee_on(gpu_type) > tenants.get("mid").guarantee_on(gpu_type)
    assert tenants.get("tiny").guaranteed == dict.fromkeys(cluster.gpu_types, 0)  # kept: it only borrows


def test_the_cli_writes_a_tenants_file_that_parses_for_the_cluster_it_names(trace_dir: Path, tmp_path: Path):
    toml = tmp_path / "t" / "vcs.toml"
    arguments = ["--tenants", "philly", "--cluster", "sia-heterogeneous", "--tenants-out", str(toml)]
    result = _generate(trace_dir, tmp_path / "w.csv", *arguments)
    assert result.exit_code == 0, result.output
    assert str(toml) in result.output
    tenants = parse_tenants(tomllib.loads(toml.read_text()), HETEROGENEOUS)
    assert set(tenants.names) == {row["tenant"] for row in _rows(tmp_path / "w.csv")}
    assert set(tenants.get("big").guaranteed) == {"aws", "rtx", "dgx-ext"}


def test_the_same_seed_writes_the_same_files_and_another_seed_others(trace_dir: Path, tmp_path: Path):
    for name, seed in (("one", "3"), ("again", "3"), ("other", "4")):
        result = _generate(trace_dir, tmp_path / f"{name}.csv", "--tenants", "philly", "--seed", seed)
        assert result.exit_code == 0, result.output
    read = lambda name, suffix: (tmp_path / f"{name}{suffix}").read_bytes()  # noqa: E731
    assert read("one", ".csv") == read("again", ".csv")
    assert read("one", ".tenants.toml") == read("again", ".tenants.toml")
    assert read("one", ".csv") != read("other", ".csv")


@pytest.mark.parametrize("source", ["trace", "summary"])
def test_flood_is_100_jobs_of_a_at_time_0_and_10_of_b_in_the_first_two_hours(
    trace_dir: Path, tmp_path: Path, source: str
):
    out = tmp_path / "flood.csv"
    arguments = ["scenario", "flood", "--seed", "2", "--source", source, "--data-dir", str(trace_dir)]
    result = CliRunner().invoke(app, [*arguments, "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = _rows(out)
    a_times = [float(row["time"]) for row in rows if row["tenant"] == "a"]
    b_times = [float(row["time"]) for row in rows if row["tenant"] == "b"]
    assert len(rows) == 110 and a_times == [0.0] * 100
    assert len(b_times) == 10 and all(0 <= t < FLOOD_SPAN_S for t in b_times) and len(set(b_times)) == 10
    assert {row["application"] for row in rows} <= {"cifar10", "ncf", "deepspeech2", "bert", "yolov3", "imagenet"}
    tenants = parse_tenants(tomllib.loads((tmp_path / "flood.tenants.toml").read_text()), Cluster(16, 4))
    assert tenants.names == ("a", "b")
    assert [t.guaranteed for t in tenants.tenants] == [{"aws": 32}, {"aws": 32}]


def test_flood_jobs_are_the_generators_draws_and_fixed_by_seed(trace_dir: Path):
    flood = flood_workload(7, Cluster(16, 4), trace_dir)
    assert flood == flood_workload(7, Cluster(16, 4), trace_dir)
    assert flood.workload.jobs != flood_workload(8, Cluster(16, 4), trace_dir).workload.jobs
    drawn = generate_workload(110, 8, seed=7, data_dir=trace_dir)
    requests = lambda jobs: Counter((j.application, j.num_replicas, j.batch_size) for j in jobs)  # noqa: E731
    assert requests(flood.workload.jobs) == requests(drawn.jobs)
    assert len({job.name for job in flood.workload.jobs}) == 110


def test_flood_halves_every_type_of_a_heterogeneous_cluster(trace_dir: Path):
    tenants = flood_workload(1, HETEROGENEOUS, trace_dir).tenants
    assert [dict(t.guaranteed) for t in tenants.tenants] == [{"aws": 12, "rtx": 12, "dgx-ext": 8}] * 2


def test_requests_are_drawn_among_those_that_fit_a_type_of_the_cluster(trace_dir: Path):
    """On sia-heterogeneous (24 GPUs of its largest type) no VC job asks for more; flood jobs fit one tenant's half."""
    choices = lambda app: [(1, 8), (24, 8), (32, 8)]  # noqa: E731
    vc = philly_vc_workload(300, 4, seed=1, cluster=HETEROGENEOUS, data_dir=trace_dir, configs=choices).workload
    assert {job.num_replicas for job in vc.jobs} == {1, 24}
    flood = flood_workload(1, Cluster(16, 4), trace_dir, configs=lambda app: [(1, 8), (32, 8), (48, 8)]).workload
    assert {job.num_replicas for job in flood.jobs} == {1, 32}
    with pytest.raises(SpecError, match="no request of 'ncf' fits in 4 GPUs"):
        requests_up_to(4, lambda app: [(8, 16)])("ncf")


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--cluster", "sia-heterogeneous"], "--cluster shapes the tenants file"),
        (["--nodes", "4"], "--nodes shapes the tenants file"),
        (["--tenants", "philly", "--source", "summary"], "drop --source summary"),
        (["--tenants", "philly", "--cluster", "sia-heterogeneous", "--nodes", "4"], "both describe the cluster"),
    ],
)
def test_options_that_do_not_fit_are_refused_in_one_line(trace_dir: Path, tmp_path: Path, extra, fragment):
    result = _generate(trace_dir, tmp_path / "w.csv", *extra)
    assert result.exit_code == 2 and result.output.count("\n") == 1 and fragment in result.output, result.output
    assert not (tmp_path / "w.csv").exists()


def test_a_trace_without_vcs_or_with_a_bad_vc_name_is_refused_by_file(tmp_path: Path):
    no_vc = _generate(_trace_dir(tmp_path / "x", with_vc=False), tmp_path / "w.csv", "--tenants", "philly")
    assert no_vc.exit_code == 2 and "no 'cluster' column" in no_vc.output, no_vc.output
    bad = _generate(_trace_dir(tmp_path / "y", ("big", "Team X")), tmp_path / "w.csv", "--tenants", "philly")
    assert bad.exit_code == 2 and "'Team X' is not a valid tenant name" in bad.output, bad.output


def _real_data() -> Path:
    if not (locate.SHARED_DATA_DIR / "philly-jobs.csv").is_file():
        pytest.skip(f"needs the real data at {locate.SHARED_DATA_DIR}")
    return locate.SHARED_DATA_DIR


BEFORE_TENANTS_SHA256 = "f928ef2a6f698934e8625912b86b7cf1870d259eabd75fd41ca31bafca652057"


def test_without_tenants_the_real_trace_workload_is_byte_identical_to_before(tmp_path: Path):
    """sha256 of `generate -n 160 --hours 8 --seed 1` on the real trace, as written before tenants existed."""
    out = tmp_path / "w.csv"
    arguments = ["generate", "-n", "160", "--hours", "8", "--seed", "1", "--data-dir", str(_real_data())]
    result = CliRunner().invoke(app, [*arguments, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert hashlib.sha256(out.read_bytes()).hexdigest() == BEFORE_TENANTS_SHA256


def test_real_philly_vcs_are_valid_tenants_on_both_benchmark_clusters():
    data_dir = _real_data()
    for cluster in (Cluster(16, 4), HETEROGENEOUS):
        chosen = philly_vc_workload(160, 8, seed=1, cluster=cluster, data_dir=data_dir)
        tenants = parse_tenants(tomllib.loads(tenants_toml(chosen.tenants)), cluster)
        assert set(chosen.tenant_of.values()) == set(tenants.names)
        assert any(t.guarantee_on("aws") > 0 for t in tenants.tenants)
        largest = max(cluster.gpus_of_type(t) for t in cluster.gpu_types)
        assert max(job.num_replicas for job in chosen.workload.jobs) <= largest
