"""The Pollux policy on clusters of several GPU types: one type per job, capacity per type, the bootstrap, and the
one-type search unchanged where there is one type."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from policy_jobs import PARAMS
from pollux_jobs import NOW, random_job

from pollux.cluster import Cluster, NodeGroup, validate_allocations
from pollux.goodput import GradientStats, throughput
from pollux.policies.base import JobView
from pollux.policies.pollux import EPSILON, PolluxPolicy
from pollux.policies.typed_search import envelope_vertices, model_on, optimize_typed, type_slices, typed_value_tables

TYPES = ("slow", "fast")
SPEED = {"slow": 1.0, "fast": 3.0}


def typed_cluster(rng: np.random.Generator) -> Cluster:
    groups = [NodeGroup(t, int(rng.integers(1, 4)), int(rng.choice([2, 4, 8]))) for t in TYPES]
    return Cluster.of_groups(groups[:: int(rng.choice([1, -1]))])


def typed_job(rng: np.random.Generator, name: str, cluster: Cluster) -> JobView:
    """A random job that has run on the slow type (its model fitted there) or not at all, holding GPUs of one type
    or none."""
    job = random_job(rng, name, cluster)
    fitted = {"slow": job.throughput_params} if job.throughput_params is not None else {}
    allowed = None if rng.random() < 0.8 else (str(rng.choice(TYPES)),)
    allocation = cluster.empty()
    if rng.random() < 0.5:  # holds GPUs on one node of a type it may use, within its bounds
        t = str(rng.choice(TYPES)) if allowed is None else allowed[0]
        node = int(rng.choice(cluster.nodes_of_type(t)))
        low, high = max(job.min_gpus, 1), min(cluster.node_gpus[node], job.max_gpus)
        if low <= high:
            gpus = int(rng.integers(low, high + 1))
            allocation = tuple(gpus if n == node else 0 for n in range(cluster.num_nodes))
    return replace(
        job,
        allocation=allocation,
        gpu_types=allowed,
        throughput_params_by_type=fitted,
        single_gpu_throughput_by_type=dict(SPEED),
        local_bsz_bounds_by_type={"fast": (job.local_bsz_bounds[0], 2 * job.local_bsz_bounds[1])},
    )


def typed_rounds(seed: int, count: int):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        cluster = typed_cluster(rng)
        jobs = [typed_job(rng, f"job-{i}", cluster) for i in range(int(rng.integers(1, 14)))]
        used = np.zeros(cluster.num_nodes, dtype=int)
        kept = []
        for job in jobs:  # current allocations that fit together
            if np.all(used + np.array(job.allocation) <= np.array(cluster.node_gpus)):
                used += np.array(job.allocation)
                kept.append(job)
            else:
                kept.append(replace(job, allocation=cluster.empty()))
        yield cluster, kept


def test_no_job_spans_two_types_or_a_type_it_may_not_use_and_capacity_holds():
    policy = PolluxPolicy()
    for cluster, jobs in typed_rounds(1, 60):
        result = policy.optimize(jobs, cluster, NOW)
        validate_allocations(cluster, result.allocations, avoid_sharing=True)
        for job in jobs:
            alloc = result.allocations.get(job.name)
            if alloc is None:
                assert job.name in result.reasons
                continue
            gpu_type = cluster.allocation_type(alloc)
            assert gpu_type is not None and job.may_run_on(gpu_type)
            assert sum(alloc) <= job.max_gpus


def test_the_same_inputs_give_the_same_allocations():
    for cluster, jobs in typed_rounds(2, 20):
        first = PolluxPolicy().optimize(jobs, cluster, NOW).allocations
        assert PolluxPolicy().optimize(jobs, cluster, NOW).allocations == first


def test_on_one_type_the_typed_search_is_the_one_type_search():
    rng = np.random.default_rng(3)
    policy = PolluxPolicy()
    for _ in range(40):
        cluster = Cluster(int(rng.integers(1, 6)), int(rng.integers(1, 7)))
        jobs = [random_job(rng, f"job-{i}", cluster) for i in range(int(rng.integers(1, 12)))]
        placed, _ = optimize_typed(policy, jobs, cluster, NOW)
        assert placed == dict(policy.optimize(jobs, cluster, NOW).allocations)


def test_a_type_the_job_never_ran_on_is_predicted_by_the_one_gpu_ratio_and_no_faster():
    job = replace(
        random_job(np.random.default_rng(4), "a", Cluster(2, 4)),
        throughput_params=PARAMS,
        throughput_params_by_type={"slow": PARAMS},
        single_gpu_throughput_by_type=dict(SPEED),
    )
    guessed = model_on(job, "fast")
    assert guessed is not None
    for nodes, replicas, local in [(1, 1, 32), (1, 4, 64), (2, 8, 16), (3, 12, 128)]:
        known = float(throughput(PARAMS, nodes, replicas, local))
        assert float(throughput(guessed, nodes, replicas, local)) <= SPEED["fast"] / SPEED["slow"] * known * (1 + 1e-9)


def test_a_job_that_gains_most_from_the_fast_type_gets_it():
    """Two jobs, one fast GPU and one slow one: the job the fast GPU speeds up more takes it."""
    cluster = Cluster.of_groups([NodeGroup("slow", 1, 1), NodeGroup("fast", 1, 1)])
    common = dict(
        throughput_params=PARAMS,
        grad_stats=GradientStats(sqr=1.0, var=5.0),
        max_gpus=1,
        min_gpus=0,
        batch_size=None,
        num_restarts=0,
        allocation=cluster.empty(),
        submit_time_s=0.0,
    )
    base = random_job(np.random.default_rng(5), "x", cluster)
    gains = {"keen": {"slow": 1.0, "fast": 4.0}, "indifferent": {"slow": 1.0, "fast": 1.2}}
    jobs = [
        replace(
            base, name=name, throughput_params_by_type={"slow": PARAMS}, single_gpu_throughput_by_type=speed, **common
        )
        for name, speed in gains.items()
    ]
    result = PolluxPolicy().optimize(jobs, cluster, NOW)
    assert cluster.allocation_type(result.allocations["keen"]) == "fast"
    assert cluster.allocation_type(result.allocations["indifferent"]) == "slow"


def test_values_are_relative_to_one_base_per_job_across_types():
    """A job's speedup on a fair share is the same number whichever type's table it is read from, scaled by that
    type's speed: one base per job, not one per type."""
    rng = np.random.default_rng(6)
    cluster = Cluster.of_groups([NodeGroup("slow", 2, 4), NodeGroup("fast", 2, 4)])
    job = replace(
        typed_job(rng, "a", cluster),
        throughput_params=PARAMS,
        throughput_params_by_type={"slow": PARAMS},
        allocation=cluster.empty(),
        gpu_types=None,
        local_bsz_bounds_by_type={},
        max_gpus=4,
        min_gpus=0,
    )
    policy = PolluxPolicy(p=1.0)  # utility = speedup + ε: the speedups themselves
    slow, fast = typed_value_tables(policy, [job], cluster, type_slices(cluster), NOW)
    factor = policy.realloc_factor(job, NOW)
    ratio = (fast.table[0, 0, 1:5] - EPSILON) / (slow.table[0, 0, 1:5] - EPSILON)
    assert factor > 0
    np.testing.assert_allclose(ratio, SPEED["fast"] / SPEED["slow"], rtol=1e-9)


def test_a_jobs_own_restart_delay_replaces_the_policys_in_the_restart_factor():
    job = replace(random_job(np.random.default_rng(7), "a", Cluster(2, 4)), submit_time_s=0.0, num_restarts=1)
    policy = PolluxPolicy(restart_delay_s=30.0)
    assert policy.realloc_factor(job, 1000.0) == (1000.0 - 30.0) / (1000.0 + 30.0)
    slow_restore = replace(job, restart_delay_s=250.0)
    assert policy.realloc_factor(slow_restore, 1000.0) == (1000.0 - 250.0) / (1000.0 + 250.0)


def test_the_types_and_counts_keep_each_types_gpus_and_are_worth_at_least_the_greedys():
    """The program's types and counts stay within every type's GPUs and on types each job may use; the round keeps
    whichever of the program and the count greedy (which settles a job's type by its first GPU) is worth more, and
    the program is worth more on some rounds."""
    from pollux.policies.search_state import greedy_counts
    from pollux.policies.typed_search import choice_value, counts_by_program

    policy = PolluxPolicy()
    beaten = 0
    for cluster, jobs in typed_rounds(9, 40):
        pieces = type_slices(cluster)
        tables = typed_value_tables(policy, jobs, cluster, pieces, NOW)
        chosen = counts_by_program(tables, pieces)
        assert chosen is not None
        kind, counts = chosen
        for t, piece in enumerate(pieces):
            assert counts[kind == t].sum() <= piece.cluster.num_gpus
        for j in np.flatnonzero(counts > 0).tolist():
            assert jobs[j].may_run_on(pieces[kind[j]].gpu_type)
        greedy = choice_value(tables, *greedy_counts(tables, jobs))
        beaten += choice_value(tables, kind, counts) > greedy + 1e-9
    assert beaten > 0


def test_a_types_nodes_are_read_and_written_back_wherever_its_groups_are_listed():
    cluster = Cluster.of_groups([NodeGroup("slow", 2, 4), NodeGroup("fast", 1, 8), NodeGroup("slow", 1, 2)])
    allocation = (1, 2, 0, 2)
    pieces = {piece.gpu_type: piece for piece in type_slices(cluster)}
    assert pieces["slow"].restrict(allocation) == (1, 2, 2) and pieces["fast"].restrict(allocation) == (0,)
    assert pieces["slow"].expand((1, 2, 2), cluster.num_nodes) == allocation


def test_envelope_vertices_are_the_counts_no_mix_of_two_others_beats():
    """The program's candidates: K is a vertex exactly when no chord between a smaller and a larger count passes
    above (or through) it; checked by brute force on concave rows (the fast path), rows with dips, and rows with
    forbidden counts (-inf), given as arrays and as lists alike."""
    rng = np.random.default_rng(3)
    for case in range(300):
        n = int(rng.integers(2, 40))
        steps = np.sort(rng.uniform(0.0, 1.0, n))[::-1] if case % 3 == 0 else rng.uniform(-0.3, 1.0, n)
        row = np.concatenate([[0.0], np.cumsum(steps)])
        if case % 5 == 0:
            row[rng.integers(1, n + 1, 2)] = -np.inf
        finite = [k for k in range(row.size) if np.isfinite(row[k])]

        expected = [k for k in finite if k > 0 and not _below_a_chord(row, finite, k)]
        assert envelope_vertices(row) == expected
        assert envelope_vertices(row.tolist()) == expected


def _below_a_chord(row: np.ndarray, finite: list[int], k: int) -> bool:
    """Whether some chord between a finite count below `k` and one above passes above or through row[k]."""
    return any(
        row[k] * (b - a) <= row[a] * (b - k) + row[b] * (k - a) for a in finite if a < k for b in finite if b > k
    )
