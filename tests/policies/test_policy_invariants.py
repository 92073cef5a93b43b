"""Invariants every baseline keeps on random clusters and jobs, round after round, fed its own decisions back."""

import copy

import numpy as np
import pytest
from policy_jobs import random_jobs, rigid_baselines, run_rounds

from pollux.cluster import Cluster, validate_allocations

POLICIES = rigid_baselines()


def scenarios(seed: int, count: int):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        cluster = Cluster(num_nodes=int(rng.integers(1, 5)), gpus_per_node=int(rng.integers(1, 9)))
        yield cluster, random_jobs(rng, int(rng.integers(1, 16)), cluster), int(rng.integers(0, 2**31))


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_no_job_gets_more_gpus_than_exist_or_than_its_nodes_hold(name):
    for cluster, jobs, seed in scenarios(11, 25):
        for views, result in run_rounds(POLICIES[name](), cluster, jobs, np.random.default_rng(seed), rounds=12):
            validate_allocations(cluster, result.allocations)  # per-node capacity, one entry per node
            requested = {job.name: job for job in views}
            assert set(result.allocations) <= set(requested)
            for job_name, alloc in result.allocations.items():
                job = requested[job_name]
                assert 0 < sum(alloc) <= cluster.num_gpus
                assert max(alloc) <= cluster.gpus_per_node
                if name == "optimus":
                    assert sum(alloc) <= max(1, min(job.max_gpus, job.batch_size // job.local_bsz_bounds[0]))
                else:
                    assert sum(alloc) == job.requested_gpus


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_waiting_job_has_a_reason_and_no_running_job_has_one(name):
    for cluster, jobs, seed in scenarios(12, 25):
        for views, result in run_rounds(POLICIES[name](), cluster, jobs, np.random.default_rng(seed), rounds=8):
            waiting = {job.name for job in views} - set(result.allocations)
            assert set(result.reasons) == waiting
            assert all(reason.startswith("waiting") for reason in result.reasons.values())


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_the_same_inputs_give_the_same_decisions(name):
    for cluster, jobs, seed in scenarios(13, 10):
        runs = [run_rounds(POLICIES[name](), cluster, jobs, np.random.default_rng(seed), rounds=10) for _ in range(2)]
        assert [r.allocations for _, r in runs[0]] == [r.allocations for _, r in runs[1]]
        assert [r.reasons for _, r in runs[0]] == [r.reasons for _, r in runs[1]]
        assert [r.batch for _, r in runs[0]] == [r.batch for _, r in runs[1]]


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_the_views_and_the_cluster_are_not_mutated(name):
    cluster, jobs, _ = next(scenarios(14, 1))
    jobs = list(jobs)  # a list a policy could sort or trim in place
    before, cluster_before = copy.deepcopy(jobs), copy.deepcopy(cluster)
    POLICIES[name]().optimize(jobs, cluster, now=600.0)
    assert [repr(j) for j in jobs] == [repr(j) for j in before]  # same order, same values, nested ones included
    assert cluster == cluster_before
