"""The quota layer in front of a tenant-unaware policy: fixed-size jobs admitted within their tenant's budget (and
on GPUs nobody's budget uses), allocations cut back to the budgets (elastic jobs shrunk largest first, rigid ones
stopped latest first), and a borrower's leases ended."""

from __future__ import annotations

from pollux.cluster import Allocation, Cluster, num_gpus
from pollux.policies.base import JobView
from pollux.quota import QuotaLayer, RoundQuota
from pollux.tenants import Tenant, Tenants

CLUSTER = Cluster(2, 4)  # 8 aws GPUs
TWO = Tenants((Tenant("a", guaranteed={"aws": 4}), Tenant("b", guaranteed={"aws": 4})))


def job(
    name: str, tenant: str, requested: int = 1, submit: float = 0.0, held: Allocation = (0, 0), max_gpus: int = 8
) -> JobView:
    return JobView(
        name=name,
        application="cifar10",
        submit_time_s=submit,
        allocation=held,
        num_restarts=0,
        attained_service_gpu_s=0.0,
        requested_gpus=requested,
        max_gpus=max_gpus,
        init_batch_size=128,
        max_batch_size=4096,
        local_bsz_bounds=(32, 256),
        tenant=tenant,
        allocated_at_s=None if not any(held) else 0.0,
    )


def plan_of(budgets: dict[str, int], held: dict[str, int] | None = None) -> RoundQuota:
    """A round's quota picture with these aws budgets (and held GPUs at its start)."""
    per_type = {name: {"aws": gpus} for name, gpus in budgets.items()}
    return RoundQuota(0.0, {}, per_type, per_type, {name: {"aws": g} for name, g in (held or {}).items()})


def test_fixed_size_jobs_are_admitted_while_their_tenants_budget_has_room():
    layer = QuotaLayer(TWO)
    jobs = [job("a1", "a", 2, 0), job("a2", "a", 2, 1), job("a3", "a", 2, 2), job("b1", "b", 4, 3)]
    plan = layer.plan(jobs, CLUSTER, 60.0, sizes_jobs=False)
    assert plan.budgets == {"a": {"aws": 4}, "b": {"aws": 4}}
    admitted, reasons, _ = layer.admit(jobs, plan, CLUSTER, sizes_jobs=False)
    assert [j.name for j in admitted] == ["a1", "a2", "b1"]
    assert reasons == {"a3": "waiting: tenant a is at its quota (4 GPUs this round)"}


def test_a_tenant_alone_is_entitled_to_the_whole_cluster():
    layer = QuotaLayer(TWO)
    jobs = [job("a1", "a", 4, 0), job("a2", "a", 4, 1)]
    plan = layer.plan(jobs, CLUSTER, 60.0, sizes_jobs=False)
    admitted, reasons, _ = layer.admit(jobs, plan, CLUSTER, sizes_jobs=False)
    assert plan.budgets["a"] == {"aws": 8} and len(admitted) == 2 and not reasons


def test_jobs_too_large_for_every_budget_run_on_the_gpus_no_budget_uses_oldest_first():
    """Guarantees 3/3/2 and jobs of 4, 4 and 3 GPUs: none fits its tenant's budget, and without lending the cluster
    would idle for ever. The oldest is lent idle GPUs; the next does not fit what is left and stops the lending."""
    tenants = Tenants(
        (Tenant("a", guaranteed={"aws": 3}), Tenant("b", guaranteed={"aws": 3}), Tenant("c", guaranteed={"aws": 2}))
    )
    layer = QuotaLayer(tenants)
    jobs = [job("b1", "b", 4, 0), job("a1", "a", 4, 1), job("c1", "c", 3, 2), job("c2", "c", 1, 3)]
    plan = layer.plan(jobs, CLUSTER, 60.0, sizes_jobs=False)
    assert plan.budgets == {"a": {"aws": 3}, "b": {"aws": 3}, "c": {"aws": 2}}
    admitted, reasons, grown = layer.admit(jobs, plan, CLUSTER, sizes_jobs=False)
    assert [j.name for j in admitted] == ["b1", "c2"]  # c2 fits c's own budget, b1 borrows; a1 and c1 wait
    assert set(reasons) == {"a1", "c1"}
    assert grown.budgets == {"a": {"aws": 3}, "b": {"aws": 4}, "c": {"aws": 2}}
    assert sum(j.requested_gpus for j in admitted) <= CLUSTER.num_gpus


def test_a_tenant_that_may_not_borrow_is_lent_nothing():
    tenants = Tenants((Tenant("a", guaranteed={"aws": 3}, borrow=False), Tenant("b", guaranteed={"aws": 3})))
    layer = QuotaLayer(tenants)
    jobs = [job("a1", "a", 4, 0), job("b1", "b", 2, 1)]
    admitted, reasons, _ = layer.admit(jobs, layer.plan(jobs, CLUSTER, 60.0, sizes_jobs=False), CLUSTER, False)
    assert [j.name for j in admitted] == ["b1"] and set(reasons) == {"a1"}


def test_an_elastic_job_is_admitted_with_its_gpu_bound_cut_to_its_tenants_budget():
    layer = QuotaLayer(TWO)
    jobs = [job("a1", "a", max_gpus=8), job("b1", "b", max_gpus=8, submit=1)]
    plan = layer.plan(jobs, CLUSTER, 60.0, sizes_jobs=True)
    admitted, reasons, _ = layer.admit(jobs, plan, CLUSTER, sizes_jobs=True)
    assert {j.name: j.max_gpus for j in admitted} == {"a1": 4, "b1": 4} and not reasons


def test_enforcement_shrinks_a_tenants_largest_elastic_jobs_first_each_keeping_a_gpu():
    cluster = Cluster(3, 4)
    jobs = [job("big", "a", submit=0), job("mid", "a", submit=1), job("one", "a", submit=2), job("b1", "b")]
    allocations = {"big": (4, 0, 0), "mid": (0, 3, 0), "one": (0, 0, 1), "b1": (0, 0, 2)}
    enforced, reasons = QuotaLayer(TWO).enforce(jobs, allocations, plan_of({"a": 4, "b": 4}), cluster, True)
    assert {name: num_gpus(alloc) for name, alloc in enforced.items()} == {"big": 1, "mid": 2, "one": 1, "b1": 2}
    assert set(reasons) == {"big", "mid"} and all(r.startswith("shrunk: tenant a") for r in reasons.values())


def test_enforcement_stops_a_tenants_latest_fixed_size_jobs_first():
    cluster = Cluster(3, 4)
    jobs = [job("first", "a", 2, 0), job("second", "a", 2, 10), job("third", "a", 2, 20)]
    allocations = {"first": (2, 0, 0), "second": (0, 2, 0), "third": (0, 0, 2)}
    enforced, reasons = QuotaLayer(TWO).enforce(jobs, allocations, plan_of({"a": 3, "b": 4}), cluster, False)
    assert set(enforced) == {"first"}
    assert set(reasons) == {"second", "third"} and all("over its quota" in r for r in reasons.values())


def test_the_leases_of_a_tenant_holding_more_than_its_budget_end_early():
    jobs = [job("a1", "a", held=(4, 0)), job("a2", "a", held=(0, 2)), job("b1", "b", held=(0, 2))]
    plan = plan_of({"a": 4, "b": 4}, held={"a": 6, "b": 2})
    assert QuotaLayer(TWO).reclaimable(jobs, plan, CLUSTER) == {"a1", "a2"}
    assert QuotaLayer(TWO).reclaimable(jobs, plan_of({"a": 6, "b": 2}, held={"a": 6, "b": 2}), CLUSTER) == set()


def test_enforcement_takes_gpus_back_from_the_jobs_the_round_moves_before_those_that_keep_theirs():
    """A leased job that keeps its 4 GPUs is not cut for a sibling the round grows: the sibling gives back."""
    cluster = Cluster(3, 4)
    jobs = [job("kept", "a", held=(4, 0, 0)), job("grown", "a", held=(0, 1, 0), submit=5)]
    allocations = {"kept": (4, 0, 0), "grown": (0, 3, 0)}
    enforced, reasons = QuotaLayer(TWO).enforce(jobs, allocations, plan_of({"a": 5, "b": 4}), cluster, True)
    assert enforced == {"kept": (4, 0, 0), "grown": (0, 1, 0)} and set(reasons) == {"grown"}
