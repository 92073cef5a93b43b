"""benchmarks.sia_replay: Sia's per-round allocations, replayed in our simulator, are what each job gets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.sia_replay import SiaReplay, SiaRun, replay
from pollux.cluster_spec import load_cluster
from pollux.errors import SpecError
from pollux.policies.base import JobView

WORKLOAD = "name,time,application,num_replicas,batch_size\ncifar10-0,0,cifar10,2,256\nbert-1,0,bert,1,384\n"
SIA_NODES = {"aws": 6, "rtx": 3, "dgx-ext": 2}  # the sia-heterogeneous preset, as Sia's logs name it


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
        lines.append(json.dumps({"timestamp": t, "num_nodes": SIA_NODES, "submitted_jobs": jobs}))
    path.write_text("\n".join(lines) + "\n")
    return path


def waiting(name: str, nodes: int) -> JobView:
    return JobView(name, "cifar10", 0.0, (0,) * nodes, 0, 0.0, 1, 64, 128, 4096, (32, 256))


def test_sias_node_of_a_type_maps_to_that_groups_node_and_a_late_job_to_its_spare_twin() -> None:
    cluster = load_cluster("sia-heterogeneous")
    run = SiaRun(
        SIA_NODES,
        {60: {"a": ("rtx", (2, 2)), "b": ("dgx-ext", (1,))}},
        {"a": 0.0, "b": 0.0},
        {"a": 100.0, "b": 1000.0},
        {"a": 0.0, "b": 0.0},
    )
    policy, doubled = SiaReplay(run, cluster), cluster.scaled(2)  # nodes: aws 0-11, rtx 12-17, dgx-ext 18-21
    jobs = [waiting("a", doubled.num_nodes), waiting("b", doubled.num_nodes)]
    first = policy.optimize(jobs, doubled, 60.0).allocations
    assert {name: {n: g for n, g in enumerate(a) if g} for name, a in first.items()} == {"a": {14: 2}, "b": {19: 1}}
    # at 120 s Sia's run had finished a (at 100 s) but not b, and gave neither GPUs: a keeps its shape on rtx node
    # 2's spare twin (12 + 3 + 2), b waits
    later = policy.optimize(jobs, doubled, 120.0).allocations
    assert {name: {n: g for n, g in enumerate(a) if g} for name, a in later.items()} == {"a": {17: 2}}
    assert policy.overrun == {"a"}


def test_a_replayed_run_follows_the_log_and_a_job_past_sias_schedule_still_finishes(tmp_path: Path) -> None:
    workload = tmp_path / "two.csv"
    workload.write_text(WORKLOAD)
    log = write_log(tmp_path / "workload-1.log", rounds=200, bert_done_s=150, cifar_done_s=11_000)
    result = replay(workload, log)
    assert result.overrun == {"bert-1"}  # it needs far longer here than the 150 s the log claims
    assert result.most_late_s == result.ours_s["bert-1"] - 150
    assert result.ours_s["cifar10-0"] < 11_000  # Sia's two A100s throughout: done long before the log says
    assert result.sia.jct_s == {"cifar10-0": 11_000.0, "bert-1": 150.0}
    # Sia's GPU-seconds from its log: 2 GPUs from 60 s to 11,000 s; 1 GPU from 60 s to 150 s
    assert result.sia.gpu_s == {"cifar10-0": 2 * (11_000 - 60), "bert-1": 150 - 60}
    assert result.relative.shape == (2,)


def test_a_log_of_another_cluster_or_workload_is_refused(tmp_path: Path) -> None:
    workload = tmp_path / "two.csv"
    workload.write_text(WORKLOAD)
    log = write_log(tmp_path / "workload-1.log", rounds=3, bert_done_s=150, cifar_done_s=180)
    with pytest.raises(SpecError, match="replay it on the cluster it ran on"):
        replay(workload, log, cluster_name="sia-homogeneous")
    other = tmp_path / "other.csv"
    other.write_text(WORKLOAD.replace("bert-1,0,", "bert-1,30,"))
    with pytest.raises(SpecError, match=r"jobs \['bert-1'\] differ from the workload's"):
        replay(other, log)


def test_a_malformed_empty_or_unfinished_log_is_refused_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.log"
    bad.write_text(json.dumps({"timestamp": 60}) + "\n")
    with pytest.raises(SpecError, match=r"bad\.log:1: not a round"):
        SiaRun.read(bad)
    empty = tmp_path / "empty.log"
    empty.write_text("\n")
    with pytest.raises(SpecError, match="no rounds"):
        SiaRun.read(empty)
    unfinished = write_log(tmp_path / "cut.log", rounds=2, bert_done_s=150, cifar_done_s=11_000)
    with pytest.raises(SpecError, match="unfinished"):
        SiaRun.read(unfinished)
