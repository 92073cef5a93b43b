"""Pollux's cluster policy: placement rules on random rounds, and the behaviour its fitness asks for."""

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest
from policy_jobs import PARAMS, run_rounds
from pollux_jobs import CLUSTER, NOW, job, random_job, scenarios

from pollux.cluster import Cluster, num_nodes_used, validate_allocations
from pollux.goodput import GradientStats
from pollux.policies.base import JobView
from pollux.policies.pollux import PolluxPolicy
from pollux.policies.speedup import speedup_table

SLOW_SYNC = replace(PARAMS, alpha_r=2.0, alpha_n=4.0)  # sync dwarfs compute: more GPUs barely help


def gpus(result, name: str) -> int:
    return sum(result.allocations.get(name, ()))


def states_of(result, jobs, cluster: Cluster) -> np.ndarray:
    """The result as one allocation matrix (1, jobs, nodes), as `evaluate` reads it."""
    return np.array([[result.allocations.get(j.name, cluster.empty()) for j in jobs]])


def worst_speedup(jobs, result, cluster: Cluster) -> float:
    fair = max(1, math.ceil(cluster.num_gpus / len(jobs)))
    worst = math.inf
    for j in jobs:
        alloc = result.allocations.get(j.name, cluster.empty())
        table = speedup_table(j, fair, max(sum(alloc), 1))
        worst = min(worst, float(table[int(num_nodes_used(alloc) > 1), sum(alloc)]))
    return worst


@pytest.mark.parametrize("avoid", [True, False])
def test_capacity_bounds_and_no_node_shared_by_two_distributed_jobs_round_after_round(avoid):
    for cluster, jobs, seed in scenarios(1 if avoid else 2, 40):
        policy = PolluxPolicy(avoid_interference=avoid)
        for views, result in run_rounds(policy, cluster, jobs, np.random.default_rng(seed), rounds=6):
            validate_allocations(cluster, result.allocations, avoid_sharing=avoid)
            by_name = {j.name: j for j in views}
            for name, alloc in result.allocations.items():
                assert max(by_name[name].min_gpus, 1) <= sum(alloc) <= by_name[name].max_gpus
            waiting = set(by_name) - set(result.allocations)
            assert set(result.reasons) == waiting
            assert all(reason.startswith("waiting") for reason in result.reasons.values())


def test_the_same_inputs_give_the_same_decisions_and_the_views_are_not_mutated():
    for cluster, jobs, seed in scenarios(3, 8):
        before = list(jobs)
        runs = [run_rounds(PolluxPolicy(), cluster, jobs, np.random.default_rng(seed), rounds=5) for _ in range(2)]
        assert [r.allocations for _, r in runs[0]] == [r.allocations for _, r in runs[1]]
        assert [r.reasons for _, r in runs[0]] == [r.reasons for _, r in runs[1]]
        assert jobs == before


def test_the_reported_fitness_is_what_evaluate_gives_and_beats_random_feasible_alternatives():
    rng = np.random.default_rng(4)
    compared = 0
    for cluster, jobs, _ in scenarios(5, 20):
        policy = PolluxPolicy()
        result = policy.optimize(jobs, cluster, NOW)
        values = policy.value_table(jobs, cluster, NOW)
        ours = policy.evaluate(values, states_of(result, jobs, cluster))[0]
        assert ours == pytest.approx(result.info["fitness"], rel=1e-9)
        alternatives = rng.integers(0, cluster.gpus_per_node + 1, (400, len(jobs), cluster.num_nodes))
        alternatives *= rng.random(alternatives.shape) < 1.5 / len(jobs)  # each node split among ~1.5 jobs
        alternatives = alternatives[policy.feasible(alternatives, cluster)]
        bounded = np.all(alternatives.sum(axis=2) <= [j.max_gpus for j in jobs], axis=1)
        assert np.all(policy.evaluate(values, alternatives[bounded]) <= ours + 1e-12)
        compared += int(bounded.sum())
    assert compared > 500


@pytest.mark.parametrize("seed", [0, 1])
def test_the_search_reaches_the_exhaustive_optimum_on_small_rounds(seed):
    """Every allocation matrix of up to 3 jobs on up to 3 nodes of up to 3 GPUs, enumerated: ours is the best.
    Jobs hold what a round before gave them, so keeping, moving and restarting all weigh in."""
    rng = np.random.default_rng(seed)
    for _ in range(60):
        cluster = Cluster(num_nodes=int(rng.integers(1, 4)), gpus_per_node=int(rng.integers(1, 4)))
        jobs = [random_job(rng, f"job-{i}", cluster) for i in range(int(rng.integers(1, 4)))]
        policy = PolluxPolicy(avoid_interference=bool(rng.random() < 0.8))
        before = policy.optimize(jobs, cluster, NOW)
        jobs = [
            replace(j, allocation=before.allocations.get(j.name, cluster.empty()), num_restarts=int(rng.integers(3)))
            for j in jobs
        ]
        result = policy.optimize(jobs, cluster, NOW + 60)
        values = policy.value_table(jobs, cluster, NOW + 60)
        rows = list(itertools.product(range(cluster.gpus_per_node + 1), repeat=cluster.num_nodes))
        states = np.array(list(itertools.product(rows, repeat=len(jobs))))
        states = states[policy.feasible(states, cluster)]
        states = states[np.all(states.sum(axis=2) <= values.max_gpus, axis=1)]
        best = policy.evaluate(values, states).max()
        assert policy.evaluate(values, states_of(result, jobs, cluster))[0] >= best - 1e-12


def test_a_job_whose_speedup_scales_better_gets_more_gpus():
    jobs = [job("slow", throughput_params=SLOW_SYNC), job("fast", throughput_params=PARAMS)]
    result = PolluxPolicy().optimize(jobs, CLUSTER, NOW)
    assert gpus(result, "fast") > gpus(result, "slow") >= 1


def test_the_restart_factor_keeps_a_young_job_with_many_restarts_where_it_is():
    young = job("young", submit_time_s=NOW - 60, num_restarts=5, allocation=(1, 0), max_gpus=8)
    kept = PolluxPolicy(restart_delay_s=30).optimize([young], CLUSTER, NOW)
    assert kept.allocations == {"young": (1, 0)}
    moved = PolluxPolicy(restart_delay_s=0).optimize([young], CLUSTER, NOW)  # no factor: it grows
    assert gpus(moved, "young") > 1


def test_p_minus_one_gives_every_job_a_gpu_when_there_are_enough():
    for cluster, jobs, _ in scenarios(6, 30):
        jobs = [replace(j, min_gpus=0) for j in jobs[: cluster.num_gpus]]
        result = PolluxPolicy(p=-1).optimize(jobs, cluster, NOW)
        assert all(gpus(result, j.name) >= 1 for j in jobs)


def test_each_exponent_wins_its_own_power_mean_and_the_exponent_matters():
    differ = 0
    for cluster, jobs, _ in scenarios(7, 30):
        fair_policy, greedy_policy = PolluxPolicy(p=-1), PolluxPolicy(p=1)
        fair = fair_policy.optimize(jobs, cluster, NOW)
        greedy = greedy_policy.optimize(jobs, cluster, NOW)
        for policy in (fair_policy, greedy_policy):
            values = policy.value_table(jobs, cluster, NOW)
            states = np.array([[r.allocations.get(j.name, cluster.empty()) for j in jobs] for r in (fair, greedy)])
            own, other = policy.evaluate(values, states)
            if policy is greedy_policy:
                own, other = other, own
            assert own >= other - 1e-9
        differ += fair.allocations != greedy.allocations
    assert differ > 0  # the exponent matters on some rounds


def test_without_interference_avoidance_two_distributed_jobs_may_share_a_node():
    cluster = Cluster(num_nodes=3, gpus_per_node=4)
    jobs = [job(n, cluster, max_gpus=6, throughput_params=replace(PARAMS, alpha_n=0.02)) for n in "ab"]
    shared = PolluxPolicy(avoid_interference=False).optimize(jobs, cluster, NOW)
    assert [num_nodes_used(shared.allocations[n]) for n in "ab"] == [2, 2]
    with pytest.raises(Exception, match="share"):
        validate_allocations(cluster, shared.allocations, avoid_sharing=True)
    avoided = PolluxPolicy(avoid_interference=True).optimize(jobs, cluster, NOW)
    validate_allocations(cluster, avoided.allocations, avoid_sharing=True)


def restarts_over_rounds(policy: PolluxPolicy, seed: int, rounds: int = 30) -> int:
    """Allocation changes of running jobs over rounds in which jobs arrive, explore (max GPUs = 2 × the most
    they ran on) and see their noise scale grow, as they do in the simulator."""
    rng = np.random.default_rng(seed)
    cluster = Cluster(num_nodes=4, gpus_per_node=4)
    pending = [random_job(rng, f"job-{i}", cluster) for i in range(10)]
    pending = [
        replace(j, submit_time_s=60.0 * i, max_gpus=1, min_gpus=0, batch_size=None) for i, j in enumerate(pending)
    ]
    active: dict[str, JobView] = {}
    restarts = 0
    for r in range(rounds):
        now = 60.0 * (r + 1)
        for j in pending:
            if j.submit_time_s < now and j.name not in active:
                active[j.name] = j
        result = policy.optimize(list(active.values()), cluster, now)
        for name, j in active.items():
            new = result.allocations.get(name, cluster.empty())
            moved = sum(j.allocation) > 0 and new != j.allocation
            restarts += moved
            stats = GradientStats(sqr=1.0, var=j.grad_stats.var * 1.2) if j.grad_stats else None
            active[name] = replace(
                j,
                allocation=new,
                num_restarts=j.num_restarts + moved,
                max_gpus=max(j.max_gpus, min(2 * sum(new), 64)),
                grad_stats=stats,
            )
    return restarts


def test_with_the_restart_factor_jobs_restart_less():
    with_factor = sum(restarts_over_rounds(PolluxPolicy(restart_delay_s=30), seed) for seed in range(3))
    without = sum(restarts_over_rounds(PolluxPolicy(restart_delay_s=0), seed) for seed in range(3))
    assert with_factor < without
