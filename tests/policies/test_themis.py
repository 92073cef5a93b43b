"""Themis with rigid jobs: the jobs furthest behind their finish-time fairness ρ are offered the GPUs no lease holds,
the best-off fraction f is left out, leases hold, and every allocation is valid on clusters of several GPU types.

Step times come from small fakes of the simulator's input (`step_time`, with the GPU type as a keyword)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from policy_jobs import by_type, one_step_per_second, random_rigid_jobs, random_typed_cluster, rigid

from pollux.cluster import Cluster, NodeGroup, validate_allocations
from pollux.errors import SpecError
from pollux.policies.registry import PolicySettings, make_policy
from pollux.policies.themis import DEFAULT_LEASE_S, ThemisPolicy, isolated_rates
from pollux.policies.tuned_jobs import type_fit
from pollux.sim.cli import default_policies
from pollux.sim.parametric import load_catalog
from pollux.sim.run import SimConfig, simulate
from pollux.sim.workload import WorkloadJob

ONE_GPU = Cluster(1, 1)


def themis(step_time=one_step_per_second, **settings) -> ThemisPolicy:
    return ThemisPolicy(step_time, **settings)


# -- building it --------------------------------------------------------------------------------------------------
def test_it_is_registered_rigid_and_takes_its_fairness_knob_from_the_settings() -> None:
    policy = make_policy("themis", PolicySettings(fairness_knob=0.5), {"step_time": lambda: one_step_per_second})
    assert isinstance(policy, ThemisPolicy) and not policy.uses_throughput_model
    assert (policy.elastic_gpus, policy.batch_owner, policy.round_s) == (False, "user", None)
    assert (policy.fairness_knob, policy.lease_s) == (0.5, DEFAULT_LEASE_S)
    assert make_policy("themis").fairness_knob == 0.2  # the Themis authors' default


@pytest.mark.parametrize("knob", [-0.1, 1.5, float("nan")])
def test_a_fairness_knob_outside_0_to_1_is_refused_in_one_line_naming_it(knob: float) -> None:
    with pytest.raises(SpecError) as refused:
        make_policy("themis", PolicySettings(fairness_knob=knob))
    message = str(refused.value)
    assert "\n" not in message and "fairness_knob" in message and "[0, 1]" in message


def test_a_lease_must_last_some_time() -> None:
    with pytest.raises(SpecError, match="lease_s"):
        ThemisPolicy(lease_s=0)


def test_it_runs_only_when_named_so_the_default_runs_stay_as_they_were() -> None:
    assert "themis" not in default_policies(Cluster(16, 4))
    assert "themis" not in default_policies(Cluster.of_groups([NodeGroup("aws", 1, 4), NodeGroup("rtx", 1, 8)]))


# -- finish-time fairness ---------------------------------------------------------------------------------------
def test_alone_on_1_over_n_of_the_cluster_a_job_time_shares_each_type_in_proportion_to_its_size() -> None:
    """Two jobs on 4 T4s and 8 A100s: the 2-GPU job's shares are 2/2 and 4/2, scaled to all of its time (1/3 and
    2/3); the 8-GPU job's are 2/8 and 4/8. A job that cannot run on a type gets no share of it."""
    rates = np.array([[1.0, 5.0], [1.0, 0.0]])
    alone = isolated_rates(rates, np.array([2.0, 8.0]), np.array([4.0, 8.0]))
    np.testing.assert_allclose(alone, [1 / 3 + 2 / 3 * 5, 0.25])


def test_the_job_furthest_behind_its_finish_time_fairness_gets_the_gpus_first() -> None:
    """Three 2-GPU jobs with the same work left wait for 4 GPUs; the one waiting longest is furthest behind (its ρ
    if left out another lease is the largest), the youngest least. With f = 1 the auction is offered to the one
    furthest behind alone; the GPUs it leaves go to the next furthest behind."""
    cluster = Cluster(1, 4)
    jobs = [rigid(name, cluster, gpus=2, submit_time_s=submit) for name, submit in [("a", 3000.0), ("b", 0.0)]]
    jobs.append(rigid("c", cluster, gpus=2, submit_time_s=1500.0))
    result = themis(fairness_knob=1.0).optimize(jobs, cluster, now=3600.0)
    rho = result.info["rho_if_left_out"]
    assert rho["b"] > rho["c"] > rho["a"]
    assert result.info["auction"] == ["b"]
    assert sorted(result.allocations) == ["b", "c"]
    assert result.reasons["a"].startswith(f"waiting: ρ {rho['a']:.2f} if left out another lease, among the best-off")


def test_f_leaves_the_best_off_jobs_out_of_the_auction() -> None:
    """`done` has run its whole life and nearly finished (its ρ is low) but gains most from the one GPU (it would end
    in a minute); `behind` has waited an hour. With f = 0 both bid and the product of ρ improvements keeps `done`
    running; with the default f the best-off half is left out and `behind` takes the GPU."""
    done = rigid("done", ONE_GPU, remaining=60.0, allocation=(1,), allocated_at_s=0.0, attained_service_gpu_s=600.0)
    behind = rigid("behind", ONE_GPU, submit_time_s=-3000.0)
    jobs = [done, behind]
    efficient = themis(fairness_knob=0.0).optimize(jobs, ONE_GPU, now=600.0)
    assert efficient.info["auction"] == ["behind", "done"] and efficient.allocations == {"done": (1,)}
    assert efficient.reasons["behind"].startswith("waiting: ρ 1.04 if left out another lease; outbid")
    fair = themis().optimize(jobs, ONE_GPU, now=600.0)
    assert fair.info["auction"] == ["behind"] and fair.allocations == {"behind": (1,)}
    assert fair.info["rho_if_left_out"]["behind"] > fair.info["rho_if_left_out"]["done"]


def test_a_running_job_keeps_its_gpus_until_its_lease_ends_then_yields_to_a_job_further_behind() -> None:
    policy = themis(lease_s=300.0)
    done = rigid("done", ONE_GPU, remaining=60.0, allocation=(1,), allocated_at_s=400.0, attained_service_gpu_s=200.0)
    behind = rigid("behind", ONE_GPU, submit_time_s=-3000.0)
    during = policy.optimize([done, behind], ONE_GPU, now=600.0)
    assert during.allocations == {"done": (1,)}
    assert during.reasons["behind"].endswith("the next lease ends in 100 s")
    after = policy.optimize([replace(done, attained_service_gpu_s=500.0), behind], ONE_GPU, now=700.0)
    assert after.allocations == {"behind": (1,)}


def test_a_jobs_speed_on_each_type_decides_its_bid_there() -> None:
    """Alone on 4 T4s and 4 A100s, a job bids a lower ρ on the A100s (5× faster) and lands there; a second job then
    gets the T4s the auction left."""
    cluster = Cluster.of_groups([NodeGroup("aws", 1, 4), NodeGroup("dgx-ext", 1, 4)])
    jobs = [rigid("a", cluster, gpus=4, submit_time_s=0.0), rigid("b", cluster, gpus=4, submit_time_s=600.0)]
    result = themis(by_type, fairness_knob=1.0).optimize(jobs, cluster, now=3600.0)
    assert result.info["auction"] == ["a"]
    assert result.allocations == {"a": (0, 4), "b": (4, 0)}


def test_a_job_that_fits_no_type_waits_with_the_reason() -> None:
    cluster = Cluster(1, 4)
    result = themis().optimize([rigid("huge", cluster, gpus=8)], cluster, now=0.0)
    assert result.allocations == {}
    assert result.reasons["huge"] == "waiting: fits no GPU type (aws: 4 GPUs, it needs 8)"


# -- every round, on clusters of several types --------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(8))
def test_allocations_are_valid_on_typed_clusters_and_leases_hold_round_after_round(seed: int) -> None:
    rng = np.random.default_rng(seed)
    policy = themis(by_type, fairness_knob=float(rng.choice([0.0, 0.2, 0.8])), lease_s=180.0)
    cluster = random_typed_cluster(rng)
    state = {job.name: job for job in random_rigid_jobs(rng, cluster, int(rng.integers(1, 25)))}
    kept = 0
    for r in range(20):
        now = 60.0 * r
        views = [job for job in state.values() if job.submit_time_s <= now]
        result = policy.optimize(views, cluster, now)
        validate_allocations(cluster, result.allocations)  # node capacity, and one type per job
        by_name = {job.name: job for job in views}
        assert set(result.reasons) == set(by_name) - set(result.allocations)
        assert all(reason.startswith("waiting") for reason in result.reasons.values())
        for name, alloc in result.allocations.items():
            job, held = by_name[name], cluster.allocation_type(alloc)
            assert held is not None and job.may_run_on(held) and type_fit(job, cluster, held).fits
            assert sum(alloc) == job.requested_gpus
            assert result.batch[name].local_bsz <= job.bounds_on(held)[1]
        for job in views:
            if policy.lease_left_s(job, now) > 0:
                assert result.allocations[job.name] == job.allocation
                kept += 1
        for job in views:  # feed the decisions back: work and service, a new allocation starts a lease
            alloc = result.allocations.get(job.name, cluster.empty())
            held = cluster.allocation_type(alloc)
            since = job.allocated_at_s if alloc == job.allocation else (now if held else None)
            ran = dict(job.run_time_by_type_s)
            if held is not None:
                ran[held] = ran.get(held, 0.0) + 60.0
            left = (job.remaining_steps or 0.0) - (60.0 / by_type(job, (1,), 64, 0, held) if held else 0.0)
            state[job.name] = replace(job, allocation=alloc, allocated_at_s=since, run_time_by_type_s=ran)
            if left <= 0:
                del state[job.name]
            else:
                state[job.name] = replace(state[job.name], remaining_steps=left)
    assert kept > 0 or len(state) <= 1


def test_the_same_jobs_in_any_order_give_the_same_decisions() -> None:
    rng = np.random.default_rng(3)
    for _ in range(10):
        cluster = random_typed_cluster(rng)
        jobs = random_rigid_jobs(rng, cluster, int(rng.integers(2, 20)))
        shuffled = [jobs[i] for i in rng.permutation(len(jobs))]
        first, second = (themis(by_type).optimize(js, cluster, now=1200.0) for js in (jobs, shuffled))
        assert (first.allocations, first.reasons, first.batch, first.info) == (
            second.allocations,
            second.reasons,
            second.batch,
            second.info,
        )


# -- in the simulator ---------------------------------------------------------------------------------------------
def test_the_simulator_runs_themis_to_the_end_of_a_small_workload() -> None:
    """What `pollux simulate -p themis` runs: the registry's policy through the simulator's engine."""
    models = load_catalog()
    apps = sorted(models)[:3]
    rows = [
        WorkloadJob(f"job-{i}", 200 * i, apps[i % 3], 1 + i % 3, models[apps[i % 3]].init_batch_size) for i in range(8)
    ]
    result = simulate(rows, make_policy("themis"), models, SimConfig(cluster=Cluster(1, 4)))
    assert result.policy == "themis"
    assert len(result.jobs) == 8 and all(j.finish_s is not None for j in result.jobs)
