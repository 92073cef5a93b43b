"""Hybrid-parallel jobs in the policies: a replica is a pipeline of k GPUs per type, goodput scales with replicas,
Pollux allocates whole replicas each on one node, and every other policy refuses such a job in one line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest
from policy_jobs import PARAMS, view

from pollux.cluster import Allocation, Cluster, NodeGroup, validate_allocations
from pollux.engine import Decision, Scheduler
from pollux.errors import SpecError
from pollux.goodput import GoodputFunction, GradientStats, ThroughputParams
from pollux.policies.base import JobView
from pollux.policies.facts import JobFacts, job_view
from pollux.policies.pollux import PolluxPolicy
from pollux.policies.registry import POLICIES, make_policy, policy_class
from pollux.policies.replicas import lay_out_replicas, refuse_pipelines, replica_problem
from pollux.policies.speedup import GoodputTables, goodput_table

A100 = ThroughputParams(alpha_c=20.0, beta_c=0.02, alpha_r=0.01, beta_r=0.002, alpha_n=0.28, beta_n=0.07, gamma=1.2)
RTX = ThroughputParams(alpha_c=16.0, beta_c=0.01, alpha_r=0.3, beta_r=0.01, alpha_n=0.4, beta_n=0.1, gamma=1.2)
STATS = GradientStats(sqr=1.0, var=200.0)
K = {"dgx-ext": 2, "rtx": 8}  # gpt_pmp's GPUs per replica (Sia §5.3)
CLUSTER = Cluster.of_groups([NodeGroup("aws", 6, 4), NodeGroup("rtx", 3, 8), NodeGroup("dgx-ext", 2, 8)])
DP = ThroughputParams(alpha_c=0.05, beta_c=0.005, alpha_r=0.02, beta_r=0.004, alpha_n=0.1, beta_n=0.02, gamma=1.5)


def gpt(
    name: str, allocation: Allocation, replicas_run: int = 2, measured: bool = True, cluster: Cluster = CLUSTER
) -> JobView:
    """A pipelined job as the simulator shows it (`JobFacts` → `job_view`) on `cluster`: 48 examples per replica,
    M0 12, at most 384 in all, models per type where `measured`."""
    types = tuple(t for t in cluster.gpu_types if t in K)
    by_type = {t: {"dgx-ext": A100, "rtx": RTX}[t] for t in types} if measured else {}
    facts = JobFacts(
        name=name,
        application="gpt_pmp",
        submit_time_s=0.0,
        allocation=allocation,
        num_restarts=0,
        attained_service_gpu_s=0.0,
        requested_gpus=16,
        init_batch_size=12,
        max_batch_size=384,
        local_bsz_bounds=(48, 48),
        max_replicas_run=replicas_run,
        throughput_params=by_type.get(types[0]),
        grad_stats=STATS if measured else None,
        gpu_types=types if cluster.heterogeneous else None,
        throughput_params_by_type=by_type,
        local_bsz_bounds_by_type={t: (48, 48) for t in types},
        run_time_by_type_s={types[0]: 100.0} if measured else {},
        single_gpu_throughput_by_type={t: {"dgx-ext": 2.3, "rtx": 2.9}[t] for t in types},
        gpus_per_replica_by_type={t: K[t] for t in types},
    )
    return job_view(facts)


def data_parallel(name: str, allocation: Allocation, submit_s: float, cluster: Cluster = CLUSTER) -> JobView:
    types = cluster.gpu_types
    facts = JobFacts(
        name=name,
        application="bert",
        submit_time_s=submit_s,
        allocation=allocation,
        num_restarts=0,
        attained_service_gpu_s=0.0,
        requested_gpus=4,
        init_batch_size=12,
        max_batch_size=384,
        local_bsz_bounds=(4, 12),
        max_replicas_run=4,
        throughput_params=DP,
        grad_stats=STATS,
        gpu_types=types if cluster.heterogeneous else None,
        throughput_params_by_type={t: DP for t in types},
        local_bsz_bounds_by_type={t: (4, 12) for t in types},
        single_gpu_throughput_by_type={t: 50.0 for t in types},
    )
    return job_view(facts)


def test_goodput_scales_with_replicas_not_gpus():
    """R replicas of k GPUs are worth the per-replica model at R, with no accumulation beyond the micro-batches;
    a count that is not whole replicas is worth nothing."""
    job = gpt("gpt", CLUSTER.empty())
    table = goodput_table(job, 16, gpus_per_replica=2)
    fn = GoodputFunction(RTX, STATS, 12)  # the model of the type it runs on (rtx, the first)
    assert job.throughput_params == RTX
    for replicas in range(1, 9):
        for spans in (0, 1):
            expected = fn.optimize(1 + spans, replicas, 384, (48, 48), accumulation=False)
            assert table[spans, 2 * replicas] == pytest.approx(float(expected.goodput))
            assert table[spans, 2 * replicas - 1] == 0.0
    # the batch is 48 per replica: R = 2 runs 96 examples a step, on 4 GPUs
    assert int(fn.optimize(1, 2, 384, (48, 48)).local_bsz) * 2 == 96
    assert table[0, 4] < fn.optimize(1, 4, 384, (48, 48)).goodput  # 4 GPUs are 2 replicas, not 4


def test_the_gpu_bound_is_in_replicas_times_the_replica_of_each_type():
    job = gpt("gpt", CLUSTER.empty(), replicas_run=2)  # twice the 2 replicas it ran: 4
    assert job.pipelined and job.gpus_per_replica("rtx") == 8 and job.gpus_per_replica("dgx-ext") == 2
    assert job.max_gpus_on("dgx-ext") == 8 and job.max_gpus_on("rtx") == 32
    assert gpt("gpt", CLUSTER.empty(), replicas_run=8).max_gpus_on("dgx-ext") == 16  # 384 / 48 = 8 replicas at most


def random_round(rng: np.random.Generator, cluster: Cluster) -> list[JobView]:
    """Two pipelined jobs and a few data-parallel ones, holding valid allocations drawn at random."""
    free = list(cluster.node_gpus)
    jobs = []
    for i in range(2):
        gpu_type = str(rng.choice([t for t in cluster.gpu_types if t in K]))
        nodes = [n for n in cluster.nodes_of_type(gpu_type) if free[n] >= K[gpu_type]]
        alloc = [0] * cluster.num_nodes
        if nodes and rng.random() < 0.7:
            for node in rng.choice(nodes, size=int(rng.integers(1, len(nodes) + 1)), replace=False).tolist():
                alloc[node] = K[gpu_type] * int(rng.integers(1, free[node] // K[gpu_type] + 1))
                free[node] -= alloc[node]
        measured = bool(rng.random() < 0.8)
        jobs.append(gpt(f"gpt-{i}", tuple(alloc), int(rng.integers(1, 5)), measured, cluster))
    for i in range(int(rng.integers(2, 7))):
        node = int(rng.integers(0, cluster.num_nodes))
        alloc = [0] * cluster.num_nodes
        if free[node] and rng.random() < 0.6:
            alloc[node] = int(rng.integers(1, free[node] + 1))
            free[node] -= alloc[node]
        jobs.append(data_parallel(f"bert-{i}", tuple(alloc), float(rng.integers(0, 3600)), cluster))
    return jobs


@pytest.mark.parametrize("cluster", [CLUSTER, Cluster(3, 8, "rtx")], ids=["sia-heterogeneous", "rtx-only"])
def test_pollux_gives_pipelined_jobs_whole_replicas_each_on_one_node(cluster):
    """Property: on random rounds, every pipelined job's allocation is whole replicas of its type's k, each on one
    node, and the round keeps the placement rules (capacity, one type per job, no two distributed jobs a node)."""
    rng = np.random.default_rng(32)
    policy = PolluxPolicy()
    given = 0
    for _ in range(6):
        jobs = random_round(rng, cluster)
        allocations = policy.optimize(jobs, cluster, 7200.0).allocations
        validate_allocations(cluster, allocations, avoid_sharing=True)
        for job in jobs:
            if job.pipelined and job.name in allocations:
                given += 1
                assert replica_problem(job, allocations[job.name], cluster) is None, (job.name, allocations[job.name])
    assert given >= 4  # the property was tested on pipelined jobs that got GPUs


def test_a_split_replica_is_laid_out_again_whole_on_one_node():
    job = gpt("gpt", CLUSTER.empty())
    rtx0, rtx1 = CLUSTER.nodes_of_type("rtx")[:2]
    split = [0] * CLUSTER.num_nodes
    split[rtx0], split[rtx1] = 6, 2  # one rtx replica of 8 split 6 + 2
    other = [0] * CLUSTER.num_nodes
    other[rtx0] = 2
    allocations = {"gpt": tuple(split), "other": tuple(other)}
    assert replica_problem(job, allocations["gpt"], CLUSTER) is not None
    laid = lay_out_replicas([job], allocations, CLUSTER, avoid_sharing=True)
    assert laid["other"] == tuple(other)
    assert replica_problem(job, laid["gpt"], CLUSTER) is None and sum(laid["gpt"]) == 8
    assert laid["gpt"][rtx1] == 8  # the whole replica where it had GPUs and room
    validate_allocations(CLUSTER, laid, avoid_sharing=True)


class OneRound:
    """A backend of fixed job views (the engine's protocol), that records what it is asked to apply."""

    def __init__(self, jobs: Sequence[JobView]) -> None:
        self.jobs, self.applied = list(jobs), []

    @property
    def cluster(self) -> Cluster:
        return CLUSTER

    def job_views(self, now: float) -> list[JobView]:
        return self.jobs

    def apply(self, decisions: Sequence[Decision], now: float) -> None:
        self.applied += decisions


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_either_allocates_whole_replicas_or_refuses_the_job_in_one_line(name):
    jobs = [gpt("gpt", CLUSTER.empty()), data_parallel("bert", CLUSTER.empty(), 0.0)]
    cls = policy_class(name)
    if cls.whole_replicas:
        return  # checked by the property above (pollux)
    with pytest.raises(SpecError) as refused:
        refuse_pipelines(cls, jobs)
    message = str(refused.value)
    assert "\n" not in message and "job gpt" in message and f"policy {name!r}" in message
    assert "2 GPUs on dgx-ext, 8 GPUs on rtx" in message and "-p pollux" in message


def test_the_engine_refuses_a_pipelined_job_under_a_policy_that_does_not_allocate_whole_replicas():
    backend = OneRound([gpt("gpt", CLUSTER.empty())])
    with pytest.raises(SpecError, match="policy 'fifo' does not allocate whole replicas"):
        Scheduler(make_policy("fifo"), backend).step(60.0)
    assert backend.applied == []
    assert [name for name in POLICIES if policy_class(name).whole_replicas] == ["pollux"]


def test_memoized_goodput_tables_keep_a_pipelined_job_apart_from_a_data_parallel_one_on_a_one_gpu_replica_type():
    """A pipelined job never accumulates, even on a type where its replica is one GPU: the memo must not hand it the
    table of a data-parallel job that is otherwise the same (nor the reverse)."""
    stats = GradientStats(sqr=1.0, var=50.0)
    data_parallel = replace(view("dp", batch_size=None, params=PARAMS, max_gpus=8), grad_stats=stats)
    pipelined = replace(data_parallel, name="pp", gpus_per_replica_by_type={"a100": 1, "rtx": 4})
    assert pipelined.pipelined and pipelined.gpus_per_replica("a100") == 1
    expected = {job.name: goodput_table(job, 8) for job in (data_parallel, pipelined)}
    assert not np.array_equal(expected["dp"], expected["pp"])  # accumulation lets the data-parallel job go further
    tables = GoodputTables()
    for job in (data_parallel, pipelined, data_parallel):
        assert np.array_equal(tables(job, 8, PARAMS, job.local_bsz_bounds), expected[job.name])
