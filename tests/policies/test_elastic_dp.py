"""Elastic-DP: the dynamic program is optimal, every job stays in its range, FIFO admission, event-driven."""

import itertools
from dataclasses import replace

import numpy as np
import pytest
from policy_jobs import PARAMS, view

from pollux.cluster import Cluster, num_nodes_used, validate_allocations
from pollux.goodput import throughput
from pollux.policies.base import JobView
from pollux.policies.elastic_dp import ElasticDPPolicy, best_counts, place, rate_table

CLUSTER = Cluster(num_nodes=2, gpus_per_node=4)
SLOW_SYNC = replace(PARAMS, alpha_r=2.0, alpha_n=4.0)  # sync dwarfs compute: more GPUs barely help


def job(name: str, submit: float = 0.0, cluster: Cluster = CLUSTER, **fields) -> JobView:
    base = view(name, submit=submit, num_nodes=cluster.num_nodes, params=PARAMS)
    return replace(base, **fields)


def random_job(rng: np.random.Generator, name: str, cluster: Cluster) -> JobView:
    lo_m = int(rng.choice([4, 16, 32]))
    hi_m = lo_m * int(rng.choice([1, 2, 8]))
    m0 = int(rng.choice([lo_m, 2 * hi_m, 3 * lo_m]))
    params = replace(
        PARAMS, alpha_r=float(rng.uniform(0, 0.3)), beta_r=float(rng.uniform(0, 0.05)), gamma=float(rng.uniform(1, 3))
    )
    return job(
        name,
        submit=float(rng.integers(0, 100)),
        cluster=cluster,
        throughput_params=params if rng.random() < 0.8 else None,
        min_gpus=int(rng.integers(0, 4)),
        max_gpus=int(rng.integers(1, 10)),
        init_batch_size=m0,
        max_batch_size=m0 * int(rng.choice([1, 4, 32])),
        local_bsz_bounds=(lo_m, hi_m),
    )


def scenarios(seed: int, count: int, max_jobs: int = 8):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        cluster = Cluster(num_nodes=int(rng.integers(1, 4)), gpus_per_node=int(rng.integers(1, 5)))
        yield cluster, [random_job(rng, f"job-{i}", cluster) for i in range(int(rng.integers(1, max_jobs + 1)))]


def gpus(result, name: str) -> int:
    return sum(result.allocations.get(name, ()))


def test_the_program_finds_the_brute_force_optimum():
    checked = 0
    for cluster, jobs in scenarios(1, 60, max_jobs=4):
        tables = [rate_table(j, min(j.max_gpus, cluster.num_gpus), cluster.gpus_per_node) for j in jobs]
        tables = [t for t in tables if t.counts.size]
        options = [list(t.counts) for t in tables]
        if not tables or sum(o[0] for o in options) > cluster.num_gpus:
            continue
        brute = max(
            sum(t.rate[k] for t, k in zip(tables, combo, strict=True))
            for combo in itertools.product(*options)
            if sum(combo) <= cluster.num_gpus
        )
        counts = best_counts(tables, cluster.num_gpus)
        assert sum(counts) <= cluster.num_gpus
        assert sum(t.rate[k] for t, k in zip(tables, counts, strict=True)) == pytest.approx(brute, rel=1e-12)
        checked += 1
    assert checked >= 30


def test_the_batch_is_the_fastest_within_the_bounds():
    rng = np.random.default_rng(2)
    for _ in range(40):
        j = random_job(rng, "j", CLUSTER)
        if j.throughput_params is None:
            continue
        table = rate_table(j, 8, CLUSTER.gpus_per_node)
        lo_m, hi_m = j.local_bsz_bounds
        for k in range(1, 9):
            nodes = 1 if k <= CLUSTER.gpus_per_node else 2
            configs = [
                (m, s)
                for m in range(lo_m, hi_m + 1)
                for s in range(0, 64)
                if j.init_batch_size <= k * m * (s + 1) <= j.max_batch_size
            ]
            if k < max(j.min_gpus, 1) or not configs:
                assert table.rate[k] == -np.inf
                continue
            least_accum = min(s for _, s in configs)  # accumulation only as much as M0 needs
            best = max(throughput(j.throughput_params, nodes, k, m, s) for m, s in configs if s == least_accum)
            assert table.rate[k] == pytest.approx(best, rel=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_counts_stay_in_each_jobs_range_and_nodes_in_capacity(seed):
    for cluster, jobs in scenarios(10 + seed, 25):
        result = ElasticDPPolicy().optimize(jobs, cluster, now=0.0)
        validate_allocations(cluster, result.allocations)
        by_name = {j.name: j for j in jobs}
        assert set(result.allocations) | set(result.reasons) == set(by_name)
        assert not set(result.allocations) & set(result.reasons)
        assert all(reason.startswith("waiting") for reason in result.reasons.values())
        for name, alloc in result.allocations.items():
            j = by_name[name]
            assert max(j.min_gpus, 1) <= sum(alloc) <= j.max_gpus
            config = result.batch[name]
            lo_m, hi_m = j.local_bsz_bounds
            assert lo_m <= config.local_bsz <= hi_m
            assert j.init_batch_size <= sum(alloc) * config.local_bsz * (config.accum_steps + 1) <= j.max_batch_size


def test_a_job_whose_minimum_does_not_fit_waits_and_so_do_the_jobs_behind_it():
    cluster = Cluster(num_nodes=1, gpus_per_node=4)
    jobs = [
        job("first", submit=0, cluster=cluster, min_gpus=2),
        job("big", submit=1, cluster=cluster, min_gpus=3),
        job("small", submit=2, cluster=cluster, min_gpus=1),
    ]
    result = ElasticDPPolicy().optimize(jobs, cluster, now=0.0)
    assert list(result.allocations) == ["first"] and gpus(result, "first") == 4
    assert "needs at least 3 GPUs, 2 left" in result.reasons["big"]
    assert "behind big" in result.reasons["small"]


def test_every_admitted_job_gets_its_minimum_even_if_others_are_faster():
    jobs = [job("slow", submit=0, throughput_params=SLOW_SYNC, min_gpus=3), job("fast", submit=1)]
    result = ElasticDPPolicy().optimize(jobs, CLUSTER, now=0.0)
    assert (gpus(result, "slow"), gpus(result, "fast")) == (3, 5)


def test_a_job_without_a_throughput_model_gets_its_minimum():
    jobs = [job("new", submit=0, throughput_params=None), job("known", submit=1, max_gpus=7)]
    result = ElasticDPPolicy().optimize(jobs, CLUSTER, now=0.0)
    assert (gpus(result, "new"), gpus(result, "known")) == (1, 7)


def test_it_reacts_only_to_arrivals_and_completions():
    policy = ElasticDPPolicy()
    jobs = [job("a", submit=0), job("b", submit=1, throughput_params=SLOW_SYNC)]
    first = policy.optimize(jobs, CLUSTER, now=0.0)
    assert first.info["reacted"] and gpus(first, "a") > gpus(first, "b")
    running = [replace(j, allocation=first.allocations[j.name]) for j in jobs]
    swapped = [replace(running[0], throughput_params=SLOW_SYNC), replace(running[1], throughput_params=PARAMS)]
    assert policy.optimize(swapped, CLUSTER, now=60.0).info["reacted"] is False
    kept = policy.optimize(swapped, CLUSTER, now=60.0)
    assert kept.allocations == first.allocations and kept.batch == first.batch
    arrived = policy.optimize([*swapped, job("c", submit=50)], CLUSTER, now=120.0)
    assert arrived.info["reacted"] and gpus(arrived, "b") > gpus(arrived, "a")
    finished = policy.optimize([swapped[0]], CLUSTER, now=180.0)
    assert finished.info["reacted"] and gpus(finished, "a") == 8


def test_placement_packs_whole_nodes_and_never_splits_a_job_that_fits_one_node():
    cluster = Cluster(num_nodes=4, gpus_per_node=4)
    jobs = [job(n, cluster=cluster) for n in "abcde"]
    allocations = place(jobs, [6, 3, 3, 2, 2], cluster)
    assert allocations["a"] == (4, 1, 1, 0)  # only the job that needs two nodes anyway takes the odd GPUs
    for name in "bcde":
        assert num_nodes_used(allocations[name]) == 1
    validate_allocations(cluster, allocations)


def test_a_job_whose_count_is_unchanged_keeps_its_nodes():
    cluster = Cluster(num_nodes=2, gpus_per_node=4)
    jobs = [job("kept", cluster=cluster, allocation=(0, 2)), job("new", cluster=cluster)]
    allocations = place(jobs, [2, 4], cluster)
    assert allocations == {"kept": (0, 2), "new": (4, 0)}


def test_the_same_inputs_give_the_same_decisions():
    for cluster, jobs in scenarios(30, 10):
        first, second = (ElasticDPPolicy().optimize(jobs, cluster, now=0.0) for _ in range(2))
        assert (first.allocations, first.batch, first.reasons) == (second.allocations, second.batch, second.reasons)
