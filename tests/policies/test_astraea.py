"""Astraea: the tenant furthest below its entitlement is served first, then its job with least GPU-time; a job keeps
its GPUs for its lease; no tenant ever gets more GPUs of a type than its budget; every job runs at its request."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest
from policy_jobs import Views, random_jobs, view

from pollux.cluster import Allocation, Cluster, NodeGroup, validate_allocations
from pollux.engine import Scheduler
from pollux.errors import SpecError
from pollux.policies.astraea import DEFAULT_LEASE_S, AstraeaPolicy
from pollux.policies.base import JobView
from pollux.policies.registry import make_policy
from pollux.quota import QuotaLayer
from pollux.sim.parametric import load_catalog
from pollux.sim.run import SimConfig, simulate
from pollux.sim.workload import WorkloadJob
from pollux.tenants import Tenant, Tenants

ONE_NODE = Cluster(1, 4)


def job(name: str, tenant: str, gpus: int = 1, service: float = 0.0, num_nodes: int = 1) -> JobView:
    return replace(view(name, gpus=gpus, service=service, num_nodes=num_nodes), tenant=tenant)


def running(name: str, tenant: str, allocation: Allocation, since_s: float, service: float = 0.0) -> JobView:
    """A job holding `allocation` (its request) since `since_s`."""
    held = job(name, tenant, sum(allocation), service, num_nodes=len(allocation))
    return replace(held, allocation=allocation, allocated_at_s=since_s)


def test_it_is_registered_rigid_and_tenant_aware():
    policy = make_policy("astraea")
    assert isinstance(policy, AstraeaPolicy)
    assert (policy.elastic_gpus, policy.tenant_aware, policy.batch_owner) == (False, True, "user")
    assert policy.lease_s == DEFAULT_LEASE_S


def test_a_lease_must_last_some_time():
    with pytest.raises(SpecError, match="lease_s"):
        AstraeaPolicy(lease_s=0)


def test_without_budgets_the_tenant_with_least_gpu_time_gets_the_next_gpus():
    jobs = [job("a1", "A", gpus=4, service=900.0), job("b1", "B", gpus=4, service=600.0)]
    result = AstraeaPolicy().optimize(jobs, ONE_NODE, now=0.0)
    assert result.allocations == {"b1": (4,)}
    assert result.reasons["a1"].startswith("waiting: needs 4 GPUs")


def test_gpu_time_is_weighed_per_gpu_of_the_tenants_budget():
    """A received 2000 GPU-s on a budget of 4 GPUs (500 s per GPU), B less, 1800, on a budget of 3 (600 s per GPU):
    A is further below its entitlement and gets the GPUs both want; with equal shares B would."""
    jobs = [job("a1", "A", gpus=3, service=2000.0), job("b1", "B", gpus=3, service=1800.0)]
    result = AstraeaPolicy().optimize_within(jobs, ONE_NODE, 0.0, {"A": {"aws": 4}, "B": {"aws": 3}})
    assert result.allocations == {"a1": (3,)}
    assert result.info["tenant_usage_s"] == {"A": 500.0, "B": 600.0}
    assert result.reasons["b1"] == "waiting: needs 3 GPUs of one type, 1 free beside leased jobs and those picked first"
    assert AstraeaPolicy().optimize(jobs, ONE_NODE, 0.0).allocations == {"b1": (3,)}


def test_a_job_larger_than_its_tenants_budget_waits_and_the_tenants_others_run():
    jobs = [job("big", "B", gpus=4), job("small", "B", gpus=2, service=100.0)]
    result = AstraeaPolicy().optimize_within(jobs, ONE_NODE, 0.0, {"B": {"aws": 3}})
    assert result.allocations == {"small": (2,)}
    assert (
        result.reasons["big"] == "waiting: needs 4 GPUs, tenant B has 3 left of its budget on any one type it may use"
    )


def test_tenants_take_turns_as_each_is_given_gpus_for_a_lease():
    jobs = [job(f"a{i}", "A") for i in range(4)] + [job(f"b{i}", "B") for i in range(4)]
    result = AstraeaPolicy().optimize(jobs, ONE_NODE, now=0.0)
    assert sorted(result.allocations) == ["a0", "a1", "b0", "b1"]


def test_within_a_tenant_the_job_with_least_gpu_time_goes_first():
    jobs = [job("old", "A", 2, service=300.0), job("new", "A", 2, service=100.0), job("mid", "A", 2, service=200.0)]
    result = AstraeaPolicy().optimize(jobs, ONE_NODE, now=0.0)
    assert sorted(result.allocations) == ["mid", "new"]
    assert set(result.reasons) == {"old"}


def test_a_running_job_keeps_its_gpus_until_its_lease_ends_then_yields_to_a_tenant_further_below():
    policy = AstraeaPolicy(lease_s=600.0)
    holder = running("a1", "A", (4,), since_s=0.0, service=1200.0)
    newcomer = job("b1", "B", gpus=4)
    during = policy.optimize([holder, newcomer], ONE_NODE, now=300.0)
    assert during.allocations == {"a1": (4,)}
    assert "the next lease ends in 300 s" in during.reasons["b1"]
    after = policy.optimize([replace(holder, attained_service_gpu_s=2400.0), newcomer], ONE_NODE, now=600.0)
    assert after.allocations == {"b1": (4,)}
    assert after.reasons["a1"].startswith("waiting")


def test_a_leased_job_is_not_preempted_by_a_job_of_its_own_tenant_with_less_gpu_time():
    policy = AstraeaPolicy(lease_s=600.0)
    jobs = [running("long", "A", (4,), since_s=100.0, service=9000.0), job("short", "A", gpus=4)]
    assert policy.optimize(jobs, ONE_NODE, now=650.0).allocations == {"long": (4,)}
    assert policy.optimize(jobs, ONE_NODE, now=700.0).allocations == {"short": (4,)}


def test_a_job_chosen_again_at_its_lease_end_stays_on_its_gpus():
    cluster = Cluster(2, 4)
    jobs = [running("a1", "A", (0, 2), since_s=0.0), job("a2", "A", gpus=1, service=50.0)]
    result = AstraeaPolicy(lease_s=60.0).optimize(jobs, cluster, now=600.0)
    assert result.allocations["a1"] == (0, 2)
    assert result.allocations["a2"] == (0, 1)  # consolidated: the fullest node that holds it


def test_a_tenant_over_its_budget_gives_back_its_leased_gpus_most_gpu_time_first():
    jobs = [running("a1", "A", (2, 0), 0.0, service=100.0), running("a2", "A", (0, 2), 0.0, service=500.0)]
    jobs.append(job("b1", "B", gpus=2))
    cluster = Cluster(2, 2)
    result = AstraeaPolicy().optimize_within(jobs, cluster, 60.0, {"A": {"aws": 2}, "B": {"aws": 2}})
    assert result.allocations == {"a1": (2, 0), "b1": (0, 2)}
    assert result.reasons["a2"] == "waiting: tenant A is over its budget of 2 aws GPUs this round"


def test_a_job_of_a_tenant_without_budget_waits_with_the_reason():
    result = AstraeaPolicy().optimize_within([job("x", "X")], ONE_NODE, 0.0, {"Y": {"aws": 4}})
    assert result.allocations == {}
    assert result.reasons["x"] == "waiting: needs 1 GPUs, tenant X has 0 left of its budget on any one type it may use"


# -- budgets hold, every round --------------------------------------------------------------------------------------
def random_budgets(rng: np.random.Generator, cluster: Cluster, tenants: Sequence[str]) -> dict[str, dict[str, int]]:
    """Whole GPUs per tenant and type adding up to at most each type's capacity (what the quota layer hands out)."""
    budgets: dict[str, dict[str, int]] = {t: {} for t in tenants}
    for gpu_type in cluster.gpu_types:
        cuts = np.sort(rng.integers(0, cluster.gpus_of_type(gpu_type) + 1, size=len(tenants)))
        for tenant, share in zip(tenants, np.diff(cuts, prepend=0), strict=True):
            budgets[tenant][gpu_type] = int(share)
    return budgets


def held_per_tenant_type(jobs: Sequence[JobView], allocations, cluster: Cluster) -> dict[tuple[str, str], int]:
    held: dict[tuple[str, str], int] = {}
    tenant_of = {j.name: j.tenant for j in jobs}
    for name, alloc in allocations.items():
        key = (tenant_of[name], str(cluster.allocation_type(alloc)))
        held[key] = held.get(key, 0) + sum(alloc)
    return held


def clusters(rng: np.random.Generator):
    yield Cluster(int(rng.integers(1, 5)), int(rng.integers(1, 9)))
    yield Cluster.of_groups(
        [NodeGroup("aws", int(rng.integers(1, 4)), 4), NodeGroup("rtx", int(rng.integers(1, 3)), 8)]
    )


@pytest.mark.parametrize("seed", range(8))
def test_no_tenant_ever_holds_more_than_its_budget_and_every_job_runs_at_its_request(seed):
    rng = np.random.default_rng(seed)
    policy = AstraeaPolicy(lease_s=180.0)
    kept_leases = 0
    for cluster in clusters(rng):
        tenants = ["A", "B", "C"][: int(rng.integers(1, 4))]
        jobs = {
            j.name: replace(
                j,
                tenant=str(rng.choice(tenants)),
                gpu_types=None if rng.random() < 0.6 else (str(rng.choice([*cluster.gpu_types, "quad"])),),
            )
            for j in random_jobs(rng, int(rng.integers(1, 20)), cluster)
        }
        for r in range(15):
            now = 60.0 * r
            views = [j for j in jobs.values() if j.submit_time_s <= now]
            budgets = random_budgets(rng, cluster, tenants)
            result = policy.optimize_within(views, cluster, now, budgets)
            validate_allocations(cluster, result.allocations)
            for (tenant, gpu_type), gpus in held_per_tenant_type(views, result.allocations, cluster).items():
                assert gpus <= budgets[tenant][gpu_type], (seed, r, tenant, gpu_type)
            by_name = {v.name: v for v in views}
            for name, alloc in result.allocations.items():
                assert sum(alloc) == by_name[name].requested_gpus
                assert by_name[name].may_run_on(str(cluster.allocation_type(alloc)))
            assert set(result.reasons) == set(by_name) - set(result.allocations)
            leased = {v.name: v.allocation for v in views if policy.lease_left_s(v, now) > 0}
            leased_use = held_per_tenant_type(views, leased, cluster)
            for name, alloc in leased.items():  # a lease holds wherever its tenant's leased jobs fit its budget
                key = (by_name[name].tenant, str(cluster.allocation_type(alloc)))
                if leased_use[key] <= budgets[key[0]][key[1]]:
                    assert result.allocations[name] == alloc
                    kept_leases += 1
            for v in views:  # feed the decisions back: service grows, a changed allocation starts a lease
                alloc = result.allocations.get(v.name, cluster.empty())
                since = v.allocated_at_s if alloc == v.allocation else (now if any(alloc) else None)
                jobs[v.name] = replace(
                    v,
                    allocation=alloc,
                    allocated_at_s=since,
                    attained_service_gpu_s=v.attained_service_gpu_s + 60 * sum(alloc),
                )
    assert kept_leases > 0


# -- behind the engine's quota layer, and in the simulator ----------------------------------------------------------
def test_behind_the_quota_layer_a_borrowing_tenant_gives_back_its_gpus_within_one_round():
    """A borrowed all 4 GPUs while B had no jobs; B submits 2 jobs and is guaranteed 2: A's leased jobs with most
    GPU-time yield at once (its budget is 2), and B's jobs start."""
    tenants = Tenants((Tenant("A", guaranteed={"aws": 2}), Tenant("B", guaranteed={"aws": 2})))
    cluster = Cluster(2, 2)
    held = [(1, 0), (1, 0), (0, 1), (0, 1)]
    a_jobs = [running(f"a{i}", "A", alloc, 0.0, service=100.0 * i) for i, alloc in enumerate(held)]
    backend = Views(cluster, [*a_jobs, job("b0", "B", num_nodes=2), job("b1", "B", num_nodes=2)])
    result = Scheduler(AstraeaPolicy(), backend, quota=QuotaLayer(tenants)).step(now=60.0)
    assert result.quota is not None and result.quota.budgets == {"A": {"aws": 2}, "B": {"aws": 2}}
    assert sorted(result.allocations) == ["a0", "a1", "b0", "b1"]
    assert {d.job: d.kind for d in backend.applied} == {"a2": "stop", "a3": "stop", "b0": "start", "b1": "start"}


def test_a_job_larger_than_its_tenants_share_runs_on_what_the_others_leave_idle():
    """Guarantees 3/3/2 on 8 GPUs, and each tenant's job asks for more than its guarantee: without the quota layer's
    lending every job would wait for ever on an idle cluster (a Philly-VC workload did). The oldest is lent idle GPUs
    and starts."""
    tenants = Tenants(
        (Tenant("a", guaranteed={"aws": 3}), Tenant("b", guaranteed={"aws": 3}), Tenant("c", guaranteed={"aws": 2}))
    )
    jobs = [job("b1", "b", 4, num_nodes=1), job("a1", "a", 4, num_nodes=1), job("c1", "c", 3, num_nodes=1)]
    jobs = [replace(j, submit_time_s=float(k)) for k, j in enumerate(jobs)]
    result = Scheduler(AstraeaPolicy(), Views(Cluster(2, 4), jobs), quota=QuotaLayer(tenants)).step(now=60.0)
    assert "b1" in result.allocations and sum(result.allocations["b1"]) == 4


def test_the_simulator_runs_astraea_to_the_end_of_a_small_workload():
    """What `pollux simulate -p astraea` runs: the registry's policy through the simulator's engine."""
    models = load_catalog()
    apps = sorted(models)[:3]
    rows = [
        WorkloadJob(f"job-{i}", 200 * i, apps[i % 3], 1 + i % 3, models[apps[i % 3]].init_batch_size) for i in range(8)
    ]
    result = simulate(rows, make_policy("astraea"), models, SimConfig(cluster=Cluster(1, 4)))
    assert result.policy == "astraea"
    assert len(result.jobs) == 8 and all(j.finish_s is not None for j in result.jobs)
