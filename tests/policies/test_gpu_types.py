"""The type-unaware baselines on clusters of several GPU types: every job on one type it may use, capacity held,
and otherwise the original rule (a job that may use only one type is treated as on that type's nodes alone)."""

from dataclasses import replace

import numpy as np
import pytest
from policy_jobs import random_jobs, rigid_baselines, run_rounds, view

from pollux.cluster import Cluster, NodeGroup, validate_allocations
from pollux.cluster_spec import PRESETS
from pollux.policies.base import JobView
from pollux.policies.elastic_dp import ElasticDPPolicy
from pollux.policies.optimus import OptimusPolicy
from pollux.policies.placement import place_on_one_type

POLICIES = {**rigid_baselines(), "elastic-dp": ElasticDPPolicy}
TYPES = ("aws", "rtx", "dgx-ext", "quad")


def typed_cluster(rng: np.random.Generator) -> Cluster:
    """2-4 groups of random types (at least two distinct) and sizes."""
    while True:
        groups = [
            NodeGroup(str(rng.choice(TYPES)), int(rng.integers(1, 4)), int(rng.choice([1, 2, 4, 8])))
            for _ in range(int(rng.integers(2, 5)))
        ]
        cluster = Cluster.of_groups(groups)
        if cluster.heterogeneous:
            return cluster


def typed_jobs(rng: np.random.Generator, cluster: Cluster, count: int) -> list[JobView]:
    """Random jobs; about half may use any type, the others a random subset (sometimes a type not here)."""
    jobs = random_jobs(rng, count, cluster)
    choices = (*cluster.gpu_types, "azure")
    for i, job in enumerate(jobs):
        if rng.random() < 0.5:
            subset = rng.choice(choices, size=int(rng.integers(1, len(choices) + 1)), replace=False)
            jobs[i] = replace(job, gpu_types=tuple(str(t) for t in subset))
    return jobs


def scenarios(seed: int, count: int):
    rng = np.random.default_rng(seed)
    for preset in ("sia-heterogeneous", "sia-physical"):
        yield PRESETS[preset], rng
    for _ in range(count - 2):
        yield typed_cluster(rng), rng


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_no_allocation_spans_two_types_or_lands_on_a_type_its_job_may_not_use(name):
    placed = 0
    for cluster, rng in scenarios(31, 20):
        jobs = typed_jobs(rng, cluster, int(rng.integers(1, 20)))
        for views, result in run_rounds(POLICIES[name](), cluster, jobs, rng, rounds=10):
            validate_allocations(cluster, result.allocations)  # capacity, and one GPU type per job
            by_name = {job.name: job for job in views}
            for job_name, alloc in result.allocations.items():
                job = by_name[job_name]
                gpu_type = cluster.allocation_type(alloc)
                assert gpu_type is not None and job.may_run_on(gpu_type)
                assert sum(alloc) <= cluster.gpus_of_type(gpu_type)
                if not POLICIES[name]().elastic_gpus:
                    assert sum(alloc) == job.requested_gpus
                placed += 1
            assert set(result.reasons) == set(by_name) - set(result.allocations)
            assert all(reason.startswith("waiting") for reason in result.reasons.values())
    assert placed > 200


@pytest.mark.parametrize("name", ["fifo", "optimus"])
def test_jobs_that_may_use_one_type_are_placed_as_on_that_types_nodes_alone(name):
    """FIFO and Optimus size and place jobs type by type: restricted to one type, the decisions equal those on a
    cluster made of that type's groups only."""
    rng = np.random.default_rng(32)
    for _ in range(15):
        cluster = typed_cluster(rng)
        gpu_type = cluster.gpu_types[0]
        alone = Cluster.of_groups([g for g in cluster.groups if g.gpu_type == gpu_type])
        nodes = cluster.nodes_of_type(gpu_type)
        jobs = [replace(j, gpu_types=(gpu_type,)) for j in random_jobs(rng, int(rng.integers(1, 15)), alone)]
        wide = [replace(j, allocation=cluster.empty()) for j in jobs]
        seed = int(rng.integers(2**31))
        on_alone = run_rounds(POLICIES[name](), alone, jobs, np.random.default_rng(seed), rounds=8)
        on_cluster = run_rounds(POLICIES[name](), cluster, wide, np.random.default_rng(seed), rounds=8)
        for (_, mine), (_, theirs) in zip(on_cluster, on_alone, strict=True):
            assert {n: tuple(a[i] for i in nodes) for n, a in mine.allocations.items()} == theirs.allocations
            assert all(sum(a) == sum(a[i] for i in nodes) for a in mine.allocations.values())


def test_a_rigid_job_goes_to_the_type_holding_the_node_with_most_free_gpus():
    cluster = Cluster.of_groups([NodeGroup("aws", 2, 4), NodeGroup("rtx", 2, 8)])
    job = view("j", gpus=3, num_nodes=4)
    assert place_on_one_type(cluster, [4, 4, 5, 2], job, 3) == (0, 0, 3, 0)
    assert place_on_one_type(cluster, [4, 4, 3, 2], job, 3) == (3, 0, 0, 0)  # ties: the lower node
    assert place_on_one_type(cluster, [4, 4, 3, 2], job, 6) == (4, 2, 0, 0)  # 6 fit only among the aws nodes
    assert place_on_one_type(cluster, [2, 2, 3, 2], job, 6) is None  # 6 free on neither type
    assert place_on_one_type(cluster, [4, 4, 5, 2], replace(job, gpu_types=("aws",)), 3) == (3, 0, 0, 0)


def test_a_consolidated_job_takes_the_type_where_it_needs_fewest_nodes_then_the_best_fit():
    cluster = Cluster.of_groups([NodeGroup("aws", 2, 4), NodeGroup("rtx", 2, 8)])
    job = view("j", gpus=2, num_nodes=4)
    assert place_on_one_type(cluster, [4, 3, 8, 2], job, 2, consolidated=True) == (0, 0, 0, 2)
    # 8 GPUs: two aws nodes, or one rtx node when one is empty
    assert place_on_one_type(cluster, [4, 4, 8, 0], job, 8, consolidated=True) == (0, 0, 8, 0)
    assert place_on_one_type(cluster, [4, 4, 7, 1], job, 8, consolidated=True) == (4, 4, 0, 0)


def test_optimus_gives_extra_gpus_only_from_the_jobs_own_type():
    """Two aws GPUs and eight rtx: a job started on aws cannot grow past its type's two GPUs."""
    cluster = Cluster.of_groups([NodeGroup("aws", 1, 2), NodeGroup("rtx", 1, 8)])
    jobs = [view("a", num_nodes=2, allocation=(1, 0), remaining=1e5, batch_size=4096)]
    result = OptimusPolicy().optimize(jobs, cluster, now=0.0)
    assert result.allocations["a"] == (2, 0)


def test_elastic_dp_fits_each_count_into_one_type_or_shrinks_it():
    """Eight rtx GPUs and four aws: the program gives two jobs six GPUs each (12 in all); the first takes six rtx,
    and the second, which no type now holds, runs on the four aws GPUs left."""
    cluster = Cluster.of_groups([NodeGroup("rtx", 1, 8), NodeGroup("aws", 1, 4)])
    jobs = [
        replace(view(n, submit=i, num_nodes=2, batch_size=None, max_gpus=6), min_gpus=1) for i, n in enumerate("ab")
    ]
    result = ElasticDPPolicy().optimize(jobs, cluster, now=0.0)
    assert result.allocations == {"a": (6, 0), "b": (0, 4)}
    assert set(result.batch) == {"a", "b"}
