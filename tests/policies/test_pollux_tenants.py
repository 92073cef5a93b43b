"""Pollux searching within the tenants' GPU budgets (issue 29): no tenant ever gets more GPUs of a type than its
budget, a budget that forces a cut shrinks elastic jobs rather than stopping them, a budget that cannot bind changes
nothing, and under the engine's quota layer a tenant whose demand appears holds its guarantee within one round."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
from pollux_jobs import NOW, job, scenarios
from test_pollux_typed import typed_rounds

from pollux.cluster import Allocation, Cluster, num_gpus, validate_allocations
from pollux.engine import Decision, Scheduler
from pollux.lease import Lease
from pollux.policies.base import JobView, PolicyResult
from pollux.policies.pollux import PolluxPolicy
from pollux.policies.typed_search import counts_by_program, type_slices, typed_value_tables
from pollux.quota import QuotaLayer
from pollux.tenants import parse_tenants

TENANTS = ("a", "b", "c")
Budgets = dict[str, dict[str, int]]


def held(jobs: Sequence[JobView], allocations: Mapping[str, Allocation], cluster: Cluster) -> Budgets:
    """GPUs per tenant and type in `allocations`."""
    tenant = {j.name: j.tenant for j in jobs}
    result: Budgets = {}
    for name, alloc in allocations.items():
        gpu_type = cluster.allocation_type(alloc)
        if gpu_type is not None:
            per_type = result.setdefault(tenant[name], {})
            per_type[gpu_type] = per_type.get(gpu_type, 0) + num_gpus(alloc)
    return result


def assert_within(jobs: Sequence[JobView], result: PolicyResult, cluster: Cluster, budgets: Budgets) -> None:
    """Budgets, placement rules and the jobs' bounds hold; every waiting job has a reason."""
    validate_allocations(cluster, result.allocations, avoid_sharing=True)
    for tenant, per_type in held(jobs, result.allocations, cluster).items():
        for gpu_type, gpus in per_type.items():
            assert gpus <= budgets.get(tenant, {}).get(gpu_type, 0), (tenant, gpu_type, gpus, budgets)
    by_name = {j.name: j for j in jobs}
    for name, alloc in result.allocations.items():
        assert max(by_name[name].min_gpus, 1) <= num_gpus(alloc) <= by_name[name].max_gpus
    assert set(result.reasons) == set(by_name) - set(result.allocations)


def random_budgets(rng: np.random.Generator, cluster: Cluster) -> Budgets:
    """Any whole budgets, some tenants with none of a type, some whose budgets alone exceed a type's GPUs."""
    return {
        t: {g: int(rng.integers(0, cluster.gpus_of_type(g) + 1)) for g in cluster.gpu_types if rng.random() < 0.9}
        for t in TENANTS
        if rng.random() < 0.9
    }


def with_tenants(rng: np.random.Generator, jobs: Sequence[JobView]) -> list[JobView]:
    return [replace(j, tenant=str(rng.choice(TENANTS))) for j in jobs]


def test_no_tenant_exceeds_its_budget_round_after_round_on_one_type():
    """Random rounds fed their own allocations back, budgets drawn anew each round (a tenant often starts a round
    holding more than its new budget, as when its borrowed GPUs are reclaimed)."""
    policy = PolluxPolicy()
    for cluster, jobs, seed in scenarios(29, 15):
        rng = np.random.default_rng(seed)
        views = with_tenants(rng, jobs)
        for r in range(4):
            budgets = random_budgets(rng, cluster)
            result = policy.optimize_within(views, cluster, NOW + 60 * r, budgets)
            assert_within(views, result, cluster, budgets)
            views = [replace(j, allocation=result.allocations.get(j.name, cluster.empty())) for j in views]


def test_no_tenant_exceeds_its_budget_of_any_type_on_typed_clusters():
    policy = PolluxPolicy()
    rng = np.random.default_rng(291)
    for cluster, jobs in typed_rounds(29, 20):
        views = with_tenants(rng, jobs)
        budgets = random_budgets(rng, cluster)
        assert_within(views, policy.optimize_within(views, cluster, NOW, budgets), cluster, budgets)


def test_the_program_keeps_every_tenant_within_its_budget_per_type():
    policy = PolluxPolicy()
    rng = np.random.default_rng(292)
    for cluster, jobs in typed_rounds(30, 20):
        views = with_tenants(rng, jobs)
        budgets = random_budgets(rng, cluster)
        pieces = type_slices(cluster)
        chosen = counts_by_program(typed_value_tables(policy, views, cluster, pieces, NOW, budgets), pieces)
        assert chosen is not None
        kind, counts = chosen
        for t, piece in enumerate(pieces):
            for tenant in TENANTS:
                mine = [j for j, v in enumerate(views) if v.tenant == tenant and kind[j] == t]
                assert counts[mine].sum() <= budgets.get(tenant, {}).get(piece.gpu_type, 0)


def test_budgets_that_cannot_bind_give_exactly_the_unconstrained_result():
    """One tenant with every GPU of every type: `optimize_within` is `optimize`, on one type and on several."""
    policy = PolluxPolicy()
    rounds = [(c, j) for c, j, _ in scenarios(31, 12)] + list(typed_rounds(31, 8))
    for cluster, jobs in rounds:
        budgets = {"default": {t: cluster.gpus_of_type(t) for t in cluster.gpu_types}}
        within = policy.optimize_within(jobs, cluster, NOW, budgets)
        plain = policy.optimize(jobs, cluster, NOW)
        assert within.allocations == plain.allocations
        assert within.reasons == plain.reasons


def test_a_budget_cut_from_eight_to_four_gpus_shrinks_both_elastic_jobs_instead_of_stopping_one():
    cluster = Cluster(num_nodes=2, gpus_per_node=4)
    jobs = [
        job("a-0", cluster, tenant="a", allocation=(4, 0), max_gpus=8, submit_time_s=0.0),
        job("a-1", cluster, tenant="a", allocation=(0, 4), max_gpus=8, submit_time_s=60.0),
        job("b-0", cluster, tenant="b", max_gpus=8, submit_time_s=NOW - 60),
    ]
    assert PolluxPolicy().optimize(jobs[:2], cluster, NOW).allocations == {"a-0": (4, 0), "a-1": (0, 4)}
    budgets = {"a": {"aws": 4}, "b": {"aws": 4}}
    result = PolluxPolicy().optimize_within(jobs, cluster, NOW, budgets)
    assert_within(jobs, result, cluster, budgets)
    assert 1 <= num_gpus(result.allocations["a-0"]) <= 3
    assert 1 <= num_gpus(result.allocations["a-1"]) <= 3
    assert num_gpus(result.allocations["b-0"]) == 4


def test_a_tenant_at_its_budget_says_so_for_a_job_left_waiting():
    cluster = Cluster(num_nodes=1, gpus_per_node=4)
    jobs = [job(f"a-{i}", cluster, tenant="a", max_gpus=4) for i in range(3)]
    result = PolluxPolicy().optimize_within(jobs, cluster, NOW, {"a": {"aws": 2}})
    assert sorted(num_gpus(a) for a in result.allocations.values()) == [1, 1]
    (waiting,) = result.reasons.values()
    assert waiting == "waiting: tenant a is at its quota (2 GPUs this round)"


class ViewsBackend:
    """A backend of job views only: a decision's allocation becomes the job's allocation (restarts counted)."""

    def __init__(self, cluster: Cluster, jobs: Sequence[JobView]) -> None:
        self._cluster = cluster
        self.jobs = {j.name: j for j in jobs}

    @property
    def cluster(self) -> Cluster:
        return self._cluster

    def job_views(self, now: float) -> list[JobView]:
        return [j for j in self.jobs.values() if j.submit_time_s <= now]

    def apply(self, decisions: Sequence[Decision], now: float) -> None:
        for d in decisions:
            old = self.jobs[d.job]
            restarts = old.num_restarts + (d.kind == "resize")
            self.jobs[d.job] = replace(old, allocation=d.allocation, allocated_at_s=now, num_restarts=restarts)


def test_under_the_quota_layer_a_tenant_whose_demand_appears_holds_its_guarantee_in_one_round():
    """Tenant a's two elastic jobs hold all 8 GPUs (borrowing b's 4, under lease); b's job arrives: in the next
    round b holds its 4 guaranteed GPUs and both of a's jobs keep running, shrunk."""
    cluster = Cluster(num_nodes=2, gpus_per_node=4)
    tenants = parse_tenants(
        {"tenant": [{"name": "a", "guaranteed": {"aws": 4}}, {"name": "b", "guaranteed": {"aws": 4}}]}, cluster
    )
    first = [job(f"a-{i}", cluster, tenant="a", max_gpus=8, submit_time_s=0.0) for i in range(2)]
    arrives = job("b-0", cluster, tenant="b", max_gpus=8, submit_time_s=NOW + 30)
    backend = ViewsBackend(cluster, [*first, arrives])
    scheduler = Scheduler(PolluxPolicy(), backend, Lease(min_run_s=600.0), QuotaLayer(tenants))
    start = scheduler.step(NOW)
    assert held(backend.job_views(NOW), start.allocations, cluster) == {"a": {"aws": 8}}
    after = scheduler.step(NOW + 60)
    assert after.quota is not None and after.quota.budgets == {"a": {"aws": 4}, "b": {"aws": 4}}
    assert held(backend.job_views(NOW + 60), after.allocations, cluster) == {"a": {"aws": 4}, "b": {"aws": 4}}
    assert all(num_gpus(after.allocations[j.name]) >= 1 for j in first)
