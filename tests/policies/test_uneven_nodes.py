"""Every policy on clusters of one GPU type whose nodes differ in size: capacity per node holds round after round,
the Pollux search's layouts stay consistent, and it still finds the best allocation on small rounds."""

import itertools
from dataclasses import replace

import numpy as np
import pytest
from policy_jobs import random_jobs, run_rounds
from pollux_jobs import NOW, assert_consistent, job, random_job

from pollux.cluster import Cluster, NodeGroup, validate_allocations
from pollux.policies.elastic_dp import ElasticDPPolicy
from pollux.policies.fifo import FifoPolicy
from pollux.policies.optimus import OptimusPolicy
from pollux.policies.polish import Polisher
from pollux.policies.pollux import PolluxPolicy
from pollux.policies.tiresias import TiresiasPolicy

BASELINES = {
    "fifo": FifoPolicy,
    "tiresias": lambda: TiresiasPolicy(queue_thresholds_gpu_s=(300.0, 3000.0), starvation_s=600.0),
    "tiresias-consolidated": lambda: TiresiasPolicy(consolidate={"imagenet", "bert"}),
    "optimus": OptimusPolicy,
    "elastic-dp": ElasticDPPolicy,
}
TWO_SIZES = Cluster.of_groups([NodeGroup("aws", 2, 8), NodeGroup("aws", 4, 4)])


def uneven_cluster(rng: np.random.Generator, max_nodes: int = 3, max_gpus: int = 8) -> Cluster:
    """One GPU type in 1-3 groups of random node sizes (often, but not always, sizes that differ)."""
    groups = [
        NodeGroup("aws", int(rng.integers(1, max_nodes + 1)), int(rng.integers(1, max_gpus + 1)))
        for _ in range(int(rng.integers(1, 4)))
    ]
    return Cluster.of_groups(groups)


def clusters(seed: int, count: int):
    rng = np.random.default_rng(seed)
    yield TWO_SIZES, rng
    for _ in range(count - 1):
        yield uneven_cluster(rng), rng


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_baselines_keep_each_nodes_capacity_and_their_sizing_rule(name):
    for cluster, rng in clusters(21, 20):
        jobs = random_jobs(rng, int(rng.integers(1, 16)), cluster)
        for views, result in run_rounds(BASELINES[name](), cluster, jobs, rng, rounds=10):
            validate_allocations(cluster, result.allocations)
            by_name = {job.name: job for job in views}
            for job_name, alloc in result.allocations.items():
                assert all(g <= size for g, size in zip(alloc, cluster.node_gpus, strict=True))
                if not BASELINES[name]().elastic_gpus:
                    assert sum(alloc) == by_name[job_name].requested_gpus
            assert set(result.reasons) == set(by_name) - set(result.allocations)


@pytest.mark.parametrize("avoid", [True, False])
def test_pollux_keeps_capacity_bounds_and_interference_avoidance_on_uneven_nodes(avoid):
    for cluster, rng in clusters(22, 30):
        jobs = [random_job(rng, f"job-{i}", cluster) for i in range(int(rng.integers(1, 14)))]
        for views, result in run_rounds(PolluxPolicy(avoid_interference=avoid), cluster, jobs, rng, rounds=5):
            validate_allocations(cluster, result.allocations, avoid_sharing=avoid)
            by_name = {j.name: j for j in views}
            for job_name, alloc in result.allocations.items():
                assert max(by_name[job_name].min_gpus, 1) <= sum(alloc) <= by_name[job_name].max_gpus


def test_a_job_too_large_for_the_small_nodes_goes_whole_onto_a_large_one():
    """Six GPUs fit only an 8-GPU node: the search keeps the job on one node rather than spreading it."""
    result = PolluxPolicy().optimize([job("big", TWO_SIZES, max_gpus=6, min_gpus=6)], TWO_SIZES, NOW)
    alloc = result.allocations["big"]
    assert sum(alloc) == 6 and sum(1 for g in alloc if g) == 1 and max(alloc[:2]) == 6


def test_every_tried_polish_move_fits_the_nodes_and_the_layout_stays_consistent():
    tried = 0
    for cluster, rng in clusters(23, 25):
        jobs = [random_job(rng, f"job-{i}", cluster) for i in range(int(rng.integers(2, 14)))]
        policy = PolluxPolicy(avoid_interference=bool(rng.random() < 0.75))
        before = policy.optimize(jobs, cluster, NOW - 60)
        jobs = [replace(j, allocation=before.allocations.get(j.name, cluster.empty())) for j in jobs]
        values = policy.value_table(jobs, cluster, NOW)
        layout = policy._layout(values, policy._counts(values, jobs))
        assert_consistent(layout)
        polisher = Polisher(policy.avoid_interference)
        for _, move in polisher.tries(layout):
            _, changes = polisher.gain_of(layout, move)
            trial = type(layout)(values, layout.rows)
            for j, row in changes.items():
                trial.set(j, row)
            assert_consistent(trial)
            assert np.all(trial.free >= 0)
            tried += 1
    assert tried > 100


@pytest.mark.parametrize("seed", [0, 1])
def test_the_search_reaches_the_exhaustive_optimum_on_small_uneven_rounds(seed):
    """Every allocation matrix of up to 3 jobs on 2-3 nodes of 1-3 GPUs each, enumerated: ours is the best."""
    rng = np.random.default_rng(seed)
    checked = 0
    while checked < 40:
        cluster = Cluster.of_groups(
            [NodeGroup("aws", 1, int(rng.integers(1, 4))) for _ in range(int(rng.integers(2, 4)))]
        )
        if cluster.uniform:
            continue
        jobs = [random_job(rng, f"job-{i}", cluster) for i in range(int(rng.integers(1, 4)))]
        policy = PolluxPolicy(avoid_interference=bool(rng.random() < 0.8))
        before = policy.optimize(jobs, cluster, NOW)
        jobs = [replace(j, allocation=before.allocations.get(j.name, cluster.empty())) for j in jobs]
        result = policy.optimize(jobs, cluster, NOW + 60)
        values = policy.value_table(jobs, cluster, NOW + 60)
        rows = list(itertools.product(*(range(size + 1) for size in cluster.node_gpus)))
        states = np.array(list(itertools.product(rows, repeat=len(jobs))))
        states = states[policy.feasible(states, cluster)]
        states = states[np.all(states.sum(axis=2) <= values.max_gpus, axis=1)]
        ours = np.array([[result.allocations.get(j.name, cluster.empty()) for j in jobs]])
        assert policy.evaluate(values, ours)[0] >= policy.evaluate(values, states).max() - 1e-12
        checked += 1
