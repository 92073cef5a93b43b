"""The simulator's hybrid-parallel job (Sia §5.3): gpt_pmp's pipeline job model, and Sia's GPT scenario under
`pollux`: whole replicas on one node of one type in every round (2-GPU replicas on A100, 8-GPU on RTX), scaled down
under congestion and back up after; any other policy refuses the job in one line."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from typer.testing import CliRunner

from pollux.cli import app
from pollux.cluster import Allocation, Cluster, NodeGroup
from pollux.cluster_spec import PRESETS
from pollux.data.locate import SIA_DATASET, find_data_dir
from pollux.engine import Scheduler
from pollux.errors import DataNotFoundError, SpecError
from pollux.policies.pollux import PolluxPolicy
from pollux.sim.backend import SimBackend
from pollux.sim.hybrid import BURST_AT_S, GPT_APPLICATION, GPT_NAME, gpt_scenario
from pollux.sim.run import job_specs
from pollux.sim.typed import TypedJobModel, load_typed_models
from pollux.sim.workload import WorkloadJob, read_workload

HETEROGENEOUS = PRESETS["sia-heterogeneous"]


@pytest.fixture(scope="module")
def models() -> dict[str, TypedJobModel]:
    try:
        find_data_dir(artifact=SIA_DATASET)
    except DataNotFoundError:
        pytest.skip("needs the Sia artifact's profiles (../shared/data or `pollux data fetch --artifact sia-sosp23`)")
    return load_typed_models("sia-sosp23", pipelines=True)


def test_gpt_is_a_pipeline_of_2_a100s_or_8_rtxs_with_sias_step_time(models):
    gpt = models[GPT_APPLICATION]
    assert GPT_APPLICATION not in load_typed_models("sia-sosp23")  # opt-in: every other caller's models as before
    assert {t: gpt.gpus_per_replica(t) for t in gpt.gpu_types} == {"dgx-ext": 2, "rtx": 8}
    a100, rtx = gpt.on("dgx-ext"), gpt.on("rtx")
    assert (a100.min_local_bsz, a100.max_local_bsz, a100.init_batch_size, a100.max_batch_size) == (48, 48, 12, 384)
    # 3·((k − 1) + 48)·t_stage + t_sync, the profiles' stage times 0.144 s and 0.099 s (Sia's `PMPApplication`)
    assert a100.step_time((2,), 48) == pytest.approx((3 * 49 * 0.144 + 0.01617, 0.01617))
    assert a100.step_time((8, 8), 48) == pytest.approx((3 * 49 * 0.144 + 0.28003, 0.28003))
    assert rtx.step_time((8, 8, 8), 48) == pytest.approx((3 * 55 * 0.099 + 0.5425, 0.5425))
    with pytest.raises(ValueError, match="splits a replica of 8 GPUs"):
        rtx.step_time((4, 4), 48)


def test_a_type_whose_nodes_cannot_hold_a_replica_is_not_used(models):
    rows = [WorkloadJob(GPT_NAME, 0, GPT_APPLICATION, 16, 384)]
    small_rtx = Cluster.of_groups([NodeGroup("rtx", 4, 4), NodeGroup("dgx-ext", 1, 8)])
    policy = PolluxPolicy()
    backend = SimBackend(small_rtx, job_specs(rows, policy, models, small_rtx), models)
    assert backend.job_views(0.0)[0].gpu_types == ("dgx-ext",)
    only_small = Cluster(4, 4, "rtx")
    with pytest.raises(SpecError, match="holds one of its replicas"):
        SimBackend(only_small, job_specs(rows, policy, models, only_small), models)


@dataclass(frozen=True)
class Round:
    time_s: float
    gpu_type: str
    allocation: Allocation
    batch_size: int


@pytest.fixture(scope="module")
def scenario(models) -> list[Round]:
    """Sia's GPT scenario, small: the GPT job, then the first 8 jobs of Helios' workload-1 within 10 minutes of
    hour 1; every round until the GPT job is back to its replicas before hour 1 after fewer (or done, or 4 h)."""
    background = read_workload("saturn/workload-1", applications=models).jobs[:8]
    rows = gpt_scenario(background, burst_s=600)
    policy = PolluxPolicy()
    backend = SimBackend(HETEROGENEOUS, job_specs(rows, policy, models, HETEROGENEOUS), models)
    scheduler = Scheduler(policy, backend)
    gpt = next(job for job in backend.jobs if job.spec.name == GPT_NAME)
    rounds: list[Round] = []
    now, before, lowered = 0.0, 0, False
    while not gpt.done and now < 4 * 3600:
        backend.advance(now, 60)
        now += 60
        scheduler.step(now)
        rounds.append(Round(now, gpt.gpu_type, gpt.allocation, gpt.batch_size() if gpt.allocation else 0))
        if now < BURST_AT_S:
            before = gpt.replicas
        elif gpt.replicas < before:
            lowered = True
        elif lowered and gpt.replicas >= before:
            break
    return rounds


def test_in_every_round_the_gpt_job_holds_whole_replicas_on_one_node_of_one_type(scenario):
    """Property over every simulated round: each node it holds GPUs on is of its type and holds whole replicas
    (a multiple of k: 2 on A100, 8 on RTX), and its batch is 48 per replica, not per GPU."""
    k = {"dgx-ext": 2, "rtx": 8}
    seen = set()
    for point in scenario:
        held = [(node, gpus) for node, gpus in enumerate(point.allocation) if gpus]
        for node, gpus in held:
            assert HETEROGENEOUS.node_types[node] == point.gpu_type, point
            assert gpus % k[point.gpu_type] == 0, point
        replicas = sum(g for _, g in held) // k[point.gpu_type]
        assert point.batch_size == 48 * replicas, point
        if held:
            seen.add(point.gpu_type)
    assert seen == {"dgx-ext", "rtx"}  # it ran 2-GPU replicas on A100 and 8-GPU replicas on RTX


def test_the_gpt_job_scales_down_under_congestion_and_back_up(scenario):
    def replicas(point: Round) -> int:
        return point.batch_size // 48

    before = max(replicas(p) for p in scenario if p.time_s < BURST_AT_S)
    during = [replicas(p) for p in scenario if p.time_s >= BURST_AT_S]
    assert before == 8  # alone, the most its batch allows: 384 / 48
    assert min(during) < before / 2  # down under the burst
    assert during[-1] >= before  # and back up after


def test_simulate_refuses_the_gpt_job_under_a_policy_that_splits_replicas_in_one_line(models, tmp_path):
    workload = tmp_path / "gpt.csv"
    workload.write_text("name,time,application,num_replicas,batch_size\ngpt,0,gpt_pmp,16,384\n")
    args = ["simulate", str(workload), "--cluster", "sia-heterogeneous", "-p", "pollux", "-p", "fifo"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "policy 'fifo' does not allocate whole replicas" in lines[0]
    assert not (tmp_path / "out").exists()  # refused before anything ran
