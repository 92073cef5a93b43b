"""benchmarks.sia_replay: Sia's per-round allocations, replayed in our simulator, are what each job gets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.sia_replay import SiaReplay, SiaRun, doubled, replay
from pollux.cluster_spec import load_cluster
from pollux.errors import SpecError
from pollux.sim.run import SimConfig, simulate
from pollux.sim.typed import load_typed_models
from pollux.sim.workload import read_workload

WORKLOAD = "name,time,application,num_replicas,batch_size\ncifar10-0,0,cifar10,2,256\nbert-1,0,bert,1,384\n"


def job(name: str, allocation: list, completion: float | None) -> dict:
    return {"name": name, "allocation": allocation, "submission_time": 0, "completion_time": completion}


def write_log(path: Path, rounds: int, bert_done_s: float, cifar_done_s: float) -> Path:
    """A Sia log: cifar10-0 on 2 GPUs of the second A100 node every round; bert-1 on one RTX GPU until Sia's run
    says it finished (far sooner than it can here)."""
    lines = []
    for t in range(60, 60 * rounds + 1, 60):
        jobs = [
            job("cifar10-0", ["dgx-ext", [1, 1]], cifar_done_s if t >= cifar_done_s else None),
            job("bert-1", ["rtx", [0]] if t < bert_done_s else [], bert_done_s if t >= bert_done_s else None),
        ]
        lines.append(json.dumps({"timestamp": t, "submitted_jobs": jobs}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_each_job_runs_where_sias_log_put_it_and_a_late_one_keeps_its_gpus(tmp_path: Path) -> None:
    workload = tmp_path / "two.csv"
    workload.write_text(WORKLOAD)
    log = write_log(tmp_path / "workload-1.log", rounds=200, bert_done_s=150, cifar_done_s=11_000)
    result = replay(workload, log)
    # bert needs far longer here than the 150 s the log claims: past Sia's schedule it kept one RTX GPU (spare node)
    assert result.overrun == {"bert-1"}
    assert result.ours_s["bert-1"] > 150
    assert result.sia_s == {"cifar10-0": 11_000.0, "bert-1": 150.0}
    # cifar10 ran on Sia's two A100s throughout and finished long before Sia's log said it did
    assert result.ours_s["cifar10-0"] < 11_000
    assert result.relative.shape == (2,)


def test_gpus_and_types_follow_the_log(tmp_path: Path) -> None:
    workload = tmp_path / "two.csv"
    workload.write_text(WORKLOAD)
    log = write_log(tmp_path / "workload-1.log", rounds=200, bert_done_s=150, cifar_done_s=11_000)
    models = load_typed_models("sia-sosp23")
    cluster = doubled(load_cluster("sia-heterogeneous"))
    assert cluster.num_gpus == 128
    result = simulate(read_workload(workload).jobs, SiaReplay(SiaRun.read(log), cluster), models, SimConfig(cluster))
    records = {r.name: r for r in result.jobs}
    assert {t for t, s in records["cifar10-0"].gpu_seconds_by_type.items() if s > 0} == {"dgx-ext"}
    assert {t for t, s in records["bert-1"].gpu_seconds_by_type.items() if s > 0} == {"rtx"}
    assert {gpus for _, gpus, _ in result.job_timelines["cifar10-0"] if gpus} == {2}
    assert {gpus for _, gpus, _ in result.job_timelines["bert-1"] if gpus} == {1}


def test_a_malformed_or_unfinished_log_is_refused_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.log"
    bad.write_text(json.dumps({"timestamp": 60}) + "\n")
    with pytest.raises(SpecError, match=r"bad\.log:1: not a round"):
        SiaRun.read(bad)
    unfinished = write_log(tmp_path / "cut.log", rounds=2, bert_done_s=150, cifar_done_s=11_000)
    with pytest.raises(SpecError, match="unfinished"):
        SiaRun.read(unfinished)
