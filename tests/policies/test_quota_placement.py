"""Behind the quota layer, a fixed-size job starts on the GPU type its tenant's budget was counted on, whatever type
the policy itself would prefer."""

from __future__ import annotations

import pytest
from policy_jobs import Views

from pollux.cluster import Cluster, NodeGroup
from pollux.engine import Scheduler
from pollux.policies.base import JobView
from pollux.policies.registry import make_policy
from pollux.quota import QuotaLayer
from pollux.tenants import Tenant, Tenants


def waiting_job(name: str, tenant: str, requested: int, cluster: Cluster) -> JobView:
    return JobView(
        name=name,
        application="cifar10",
        submit_time_s=0.0,
        allocation=cluster.empty(),
        num_restarts=0,
        attained_service_gpu_s=0.0,
        requested_gpus=requested,
        max_gpus=8,
        init_batch_size=128,
        max_batch_size=4096,
        local_bsz_bounds=(32, 256),
        tenant=tenant,
    )


@pytest.mark.parametrize("policy", ["fifo", "tiresias", "gavel", "shockwave"])
@pytest.mark.parametrize("budget_type", ["aws", "rtx"])
def test_a_waiting_fixed_size_job_starts_on_the_gpu_type_its_tenants_budget_holds(policy, budget_type):
    """Its tenant's budget lies on one type only. Placed on the other by the policy, enforcement would stop it every
    round, and it would wait for ever on an idle cluster (a Philly-VC workload left a job so for 60 simulated days)."""
    cluster = Cluster.of_groups([NodeGroup("aws", 2, 4), NodeGroup("rtx", 1, 8)])
    tenants = Tenants(
        (Tenant("a", guaranteed={budget_type: 4}, borrow=False), Tenant("b", guaranteed={"aws": 4, "rtx": 4}))
    )
    waiting = waiting_job("a1", "a", 4, cluster)
    result = Scheduler(make_policy(policy), Views(cluster, [waiting]), quota=QuotaLayer(tenants)).step(now=60.0)
    assert result.quota is not None and result.quota.budgets["a"] == {"aws": 0, "rtx": 0, budget_type: 4}
    assert list(result.allocations) == ["a1"], result.reasons
    assert cluster.allocation_type(result.allocations["a1"]) == budget_type
