"""Shockwave with rigid jobs: the window's plan stays within every type's GPUs and each job's finish-time bound where
it can be met, jobs behind their fair finish time run first, every allocation is valid on clusters of several GPU
types, and the same jobs give the same decisions.

Step times come from small fakes of the simulator's input (`step_time`, with the GPU type as a keyword)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from policy_jobs import by_type, one_step_per_second, random_rigid_jobs, random_typed_cluster, rigid

from pollux.cluster import Cluster, NodeGroup, validate_allocations
from pollux.errors import SpecError
from pollux.policies.registry import make_policy
from pollux.policies.shockwave import (
    DEFAULT_WINDOW_ROUNDS,
    Plan,
    ShockwavePolicy,
    Window,
    first_round,
    plan_window,
)
from pollux.policies.tuned_jobs import type_fit
from pollux.sim.cli import default_policies
from pollux.sim.parametric import load_catalog
from pollux.sim.run import SimConfig, simulate
from pollux.sim.workload import WorkloadJob

ONE_GPU = Cluster(1, 1)


# -- building it --------------------------------------------------------------------------------------------------
def test_it_is_registered_rigid_and_runs_only_when_named() -> None:
    policy = make_policy("shockwave", inputs={"step_time": lambda: one_step_per_second})
    assert isinstance(policy, ShockwavePolicy) and not policy.uses_throughput_model
    assert (policy.elastic_gpus, policy.batch_owner, policy.round_s) == (False, "user", 60)
    assert (policy.window_rounds, policy.rhomax) == (DEFAULT_WINDOW_ROUNDS, 1.0)
    assert "shockwave" not in default_policies(Cluster(16, 4))
    assert "shockwave" not in default_policies(Cluster.of_groups([NodeGroup("aws", 1, 4), NodeGroup("rtx", 1, 8)]))


@pytest.mark.parametrize(("field", "value"), [("window_rounds", 0), ("window_rounds", 2.5), ("rhomax", 0.0)])
def test_a_bad_setting_is_refused_in_one_line_naming_it(field: str, value: float) -> None:
    with pytest.raises(SpecError) as refused:
        ShockwavePolicy(**{field: value})
    assert "\n" not in str(refused.value) and field in str(refused.value)


# -- the window's program -----------------------------------------------------------------------------------------
def random_window(rng: np.random.Generator, num_types: int) -> Window:
    """Jobs of random sizes, speeds, progress and finish-time needs on `num_types` types of 4-16 GPUs."""
    count = int(rng.integers(2, 25))
    rates = rng.uniform(0.5, 5.0, (count, num_types)) * (rng.random((count, num_types)) < 0.8)
    rates[rates.sum(axis=1) == 0, 0] = 1.0
    left = rng.uniform(100, 5000, count)
    need = np.where(rng.random(count) < 0.3, rng.uniform(0, 400, count), 0.0)
    return Window(
        rates=rates,
        gpus=rng.choice([1, 2, 4, 8], count),
        capacity=rng.choice([4, 8, 16], num_types),
        done=rng.uniform(0, 5000, count),
        left=left,
        step_s=np.array([np.mean(1 / row[row > 0]) for row in rates]),
        restore_s=np.full(count, 30.0),
        running=np.where(rng.random(count) < 0.3, rng.integers(0, num_types, count), -1),
        need=np.minimum(need, left),
        weight=rng.uniform(0.01, 1.0, count),
        rank=rng.uniform(0.5, 3.0, count),
    )


@pytest.mark.parametrize("seed", range(12))
def test_the_plan_stays_within_each_types_gpus_and_meets_every_bound_it_can(seed: int) -> None:
    rng = np.random.default_rng(seed)
    window = random_window(rng, int(rng.integers(1, 4)))
    rounds, round_s = DEFAULT_WINDOW_ROUNDS, 60.0
    plan = plan_window(window, rounds, round_s, bounded=True)
    if not plan.solved:  # the bounds cannot all be met together: the policy then plans without them
        plan = plan_window(window, rounds, round_s, bounded=False)
    else:
        assert np.all(plan.steps >= window.need - 1e-6)
    assert plan.solved
    assert np.all(plan.rounds[window.rates == 0] == 0)
    assert np.all(plan.rounds.sum(axis=1) <= rounds) and np.all(plan.steps <= window.left + 1e-6)
    assert np.all(plan.steps <= (plan.rounds * window.rates).sum(axis=1) * round_s + 1e-6)
    assert np.all(window.gpus @ plan.rounds <= rounds * window.capacity)
    used = np.zeros(window.capacity.size)
    for j, k in first_round(window, plan, rounds).items():
        assert plan.rounds[j, k] >= 1
        used[k] += window.gpus[j]
    assert np.all(used <= window.capacity)


def test_a_bound_that_can_be_met_is_met_even_at_the_cost_of_the_welfare() -> None:
    """Two 1-GPU jobs on one GPU, the same work, `a`'s welfare weighing twice `b`'s: without bounds `a` gets the
    whole window; `b`'s bound asks for four rounds' steps, and it gets them."""
    window = Window(
        rates=np.ones((2, 1)),
        gpus=np.array([1, 1]),
        capacity=np.array([1]),
        done=np.zeros(2),
        left=np.full(2, 3000.0),
        step_s=np.ones(2),
        restore_s=np.zeros(2),
        running=np.full(2, -1),
        need=np.array([0.0, 230.0]),
        weight=np.array([1.0, 0.5]),
        rank=np.ones(2),
    )
    free = plan_window(window, 5, 60.0, bounded=False)
    assert free.rounds.ravel().tolist() == [5, 0]
    bounded = plan_window(window, 5, 60.0, bounded=True)
    assert bounded.rounds.ravel().tolist() == [1, 4] and bounded.steps[1] >= 230.0


# -- the policy ---------------------------------------------------------------------------------------------------
def test_a_job_that_waited_is_behind_its_fair_finish_time_and_takes_the_gpu_from_one_that_ran() -> None:
    """Two jobs of the same work arrive together on one GPU. An hour later `ran` has run all of it and `waited` has
    waited: its fair finish-time estimate grew by the hour, its momentum mean lags, so it is behind (ρ̂ > 1), `ran`
    is not, and `waited` takes the GPU although taking it costs `ran` a restart."""
    policy = ShockwavePolicy(one_step_per_second)
    ran, waited = rigid("ran", ONE_GPU, remaining=7200.0), rigid("waited", ONE_GPU, remaining=3600.0)
    policy.optimize([ran, waited], ONE_GPU, now=0.0)
    ran = replace(ran, remaining_steps=3600.0, allocation=(1,), allocated_at_s=0.0, attained_service_gpu_s=3600.0)
    result = policy.optimize([ran, waited], ONE_GPU, now=3600.0)
    rho = result.info["rho_hat"]
    assert rho["waited"] > 1.0 >= rho["ran"] - 1e-9
    assert result.allocations == {"waited": (1,)}
    assert result.reasons["ran"].startswith(f"waiting: ρ̂ {rho['ran']:.2f};")


def test_round_0_goes_to_the_job_furthest_behind_among_plans_otherwise_alike() -> None:
    """Three 1-GPU jobs planned for two rounds each on two GPUs: the two furthest behind run now."""
    window = Window(
        rates=np.ones((3, 1)),
        gpus=np.ones(3, dtype=int),
        capacity=np.array([2]),
        done=np.zeros(3),
        left=np.full(3, 3000.0),
        step_s=np.ones(3),
        restore_s=np.zeros(3),
        running=np.full(3, -1),
        need=np.zeros(3),
        weight=np.ones(3),
        rank=np.array([1.2, 0.9, 1.5]),
    )
    plan = Plan(rounds=np.array([[2], [2], [2]]), steps=np.full(3, 120.0), solved=True)
    assert first_round(window, plan, 5) == {2: 0, 0: 0}
    running = replace(window, running=np.array([-1, 0, -1]))  # a pause would cost it a restore: it stays
    assert first_round(running, plan, 5) == {1: 0, 2: 0}
    everywhere = replace(plan, rounds=np.array([[2], [5], [2]]))  # planned for every round: it must run now
    assert first_round(window, everywhere, 5) == {1: 0, 2: 0}


def test_a_job_runs_on_the_type_where_it_is_fastest() -> None:
    """Alone on 4 T4s and 4 A100s (5× faster), a 4-GPU job runs on the A100s; a second one gets the T4s."""
    cluster = Cluster.of_groups([NodeGroup("aws", 1, 4), NodeGroup("dgx-ext", 1, 4)])
    jobs = [rigid("a", cluster, gpus=4, submit_time_s=0.0), rigid("b", cluster, gpus=4, submit_time_s=3000.0)]
    result = ShockwavePolicy(by_type).optimize(jobs, cluster, now=3600.0)
    assert result.allocations == {"a": (0, 4), "b": (4, 0)}


def test_a_job_that_fits_no_type_waits_with_the_reason() -> None:
    cluster = Cluster(1, 4)
    result = ShockwavePolicy(one_step_per_second).optimize([rigid("huge", cluster, gpus=8)], cluster, now=0.0)
    assert result.allocations == {}
    assert result.reasons["huge"] == "waiting: fits no GPU type (aws: 4 GPUs, it needs 8)"


@pytest.mark.parametrize("seed", range(6))
def test_allocations_are_valid_on_typed_clusters_round_after_round(seed: int) -> None:
    rng = np.random.default_rng(seed)
    policy = ShockwavePolicy(by_type)
    cluster = random_typed_cluster(rng)
    state = {job.name: job for job in random_rigid_jobs(rng, cluster, int(rng.integers(1, 25)))}
    for r in range(15):
        now = 60.0 * r
        views = [job for job in state.values() if job.submit_time_s <= now]
        result = policy.optimize(views, cluster, now)
        validate_allocations(cluster, result.allocations)  # node capacity, and one type per job
        by_name = {job.name: job for job in views}
        assert set(result.reasons) == set(by_name) - set(result.allocations)
        for name, alloc in result.allocations.items():
            job, held = by_name[name], cluster.allocation_type(alloc)
            assert held is not None and job.may_run_on(held) and type_fit(job, cluster, held).fits
            assert sum(alloc) == job.requested_gpus
            assert result.batch[name].local_bsz <= job.bounds_on(held)[1]
        for job in views:  # feed the decisions back: work and time held
            alloc = result.allocations.get(job.name, cluster.empty())
            held = cluster.allocation_type(alloc)
            ran = dict(job.run_time_by_type_s)
            if held is not None:
                ran[held] = ran.get(held, 0.0) + 60.0
            left = (job.remaining_steps or 0.0) - (60.0 / by_type(job, (1,), 64, 0, held) if held else 0.0)
            if left <= 0:
                del state[job.name]
            else:
                state[job.name] = replace(job, allocation=alloc, run_time_by_type_s=ran, remaining_steps=left)


def test_the_same_rounds_give_the_same_decisions_in_any_order_of_the_views() -> None:
    rng = np.random.default_rng(3)
    for _ in range(6):
        cluster = random_typed_cluster(rng)
        jobs = random_rigid_jobs(rng, cluster, int(rng.integers(2, 20)))
        shuffled = [jobs[i] for i in rng.permutation(len(jobs))]
        first, second = ShockwavePolicy(by_type), ShockwavePolicy(by_type)
        for now in (1200.0, 1260.0):
            one, two = first.optimize(jobs, cluster, now), second.optimize(shuffled, cluster, now)
            assert (one.allocations, one.reasons, one.batch, one.info) == (
                two.allocations,
                two.reasons,
                two.batch,
                two.info,
            )


# -- in the simulator ---------------------------------------------------------------------------------------------
def test_the_simulator_runs_shockwave_to_the_end_of_a_small_workload() -> None:
    """What `pollux simulate -p shockwave` runs: the registry's policy through the simulator's engine."""
    models = load_catalog()
    apps = sorted(models)[:3]
    rows = [
        WorkloadJob(f"job-{i}", 200 * i, apps[i % 3], 1 + i % 3, models[apps[i % 3]].init_batch_size) for i in range(4)
    ]
    result = simulate(rows, make_policy("shockwave"), models, SimConfig(cluster=Cluster(1, 4)))
    assert result.policy == "shockwave"
    assert len(result.jobs) == 4 and all(j.finish_s is not None for j in result.jobs)
