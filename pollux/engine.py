"""One scheduling engine for the simulator and the runtime (docs/design.md, "Parts": only the backend differs).

`Scheduler(policy, backend).step(now)` reads the backend's job views, asks the policy for allocations, checks
them against the placement rules, turns them into explicit decisions against what runs now, and hands those to
the backend. Restarts are counted from the decisions, never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from pollux.cluster import Allocation, Cluster, num_gpus, validate_allocations
from pollux.lease import Lease, keep_leases
from pollux.policies.base import BatchConfig, JobView, Policy, PolicyResult
from pollux.policies.replicas import check_whole_replicas, refuse_pipelines
from pollux.quota import QuotaLayer, RoundQuota

DecisionKind = Literal["start", "resize", "stop"]


@dataclass(frozen=True)
class Decision:
    """A change for one job: start it, move/resize it (a restart from checkpoint), or stop it."""

    job: str
    kind: DecisionKind
    allocation: Allocation  # the new one; all zeros for "stop"
    batch: BatchConfig | None = None  # the policy's batch, where it chooses one
    gpu_type: str | None = None  # the type of the GPUs it lands on (the engine's word: nobody works it out again)


class Backend(Protocol):
    """What turns decisions into progress: virtual (simulator) or real processes (runtime)."""

    @property
    def cluster(self) -> Cluster: ...

    def job_views(self, now: float) -> list[JobView]:
        """Views of every active job: submitted by `now` and not finished."""
        ...

    def apply(self, decisions: Sequence[Decision], now: float) -> None:
        """Carry out the decisions (restart the jobs whose allocation changed)."""
        ...


@dataclass(frozen=True)
class RoundResult:
    """What one scheduling round decided, and why jobs wait."""

    now: float
    decisions: tuple[Decision, ...]
    allocations: Mapping[str, Allocation]
    reasons: Mapping[str, str] = field(default_factory=dict)
    next_round_at: float | None = None  # a round is due by then: a lease the policy wanted to break ends
    quota: RoundQuota | None = None  # the tenants' demand, entitlements and budgets this round, under a quota layer


def diff(
    jobs: Sequence[JobView],
    allocations: Mapping[str, Allocation],
    cluster: Cluster,
    batch: Mapping[str, BatchConfig] | None = None,
) -> list[Decision]:
    """Decisions that turn the jobs' current allocations into `allocations`, each with the GPU type it lands on and
    the policy's batch where it has one."""
    empty, batch = cluster.empty(), batch or {}
    decisions = []
    for job in jobs:
        new = allocations.get(job.name, empty)
        old_gpus, new_gpus = num_gpus(job.allocation), num_gpus(new)
        if new == job.allocation or (old_gpus == 0 and new_gpus == 0):
            continue
        kind: DecisionKind = "stop" if new_gpus == 0 else "start" if old_gpus == 0 else "resize"
        decisions.append(Decision(job.name, kind, new, batch.get(job.name), cluster.allocation_type(new)))
    return decisions


class Scheduler:
    """Runs a policy against a backend, one round at a time; with a `lease`, a job just started or moved keeps its
    GPUs until it has restored and measured itself, whatever the policy says (`pollux.lease`); with a `quota`, every
    tenant is held to its GPU budgets (`pollux.quota`)."""

    def __init__(
        self, policy: Policy, backend: Backend, lease: Lease | None = None, quota: QuotaLayer | None = None
    ) -> None:
        self.policy = policy
        self.backend = backend
        self.lease = lease
        self.quota = quota

    def step(self, now: float) -> RoundResult:
        jobs = self.backend.job_views(now)
        cluster = self.backend.cluster
        if not jobs:
            return RoundResult(now, (), {})
        refuse_pipelines(self.policy, jobs)
        sizes_jobs = self.policy.elastic_gpus
        plan: RoundQuota | None = None
        waits: dict[str, str] = {}
        if self.quota is None:
            result = self.policy.optimize(jobs, cluster, now)
        else:
            plan = self.quota.plan(jobs, cluster, now, sizes_jobs)
            if self.policy.tenant_aware:
                if not sizes_jobs:  # fixed sizes: what admission lends grows the budgets, or a job larger than its
                    _, _, plan = self.quota.admit(jobs, plan, cluster, sizes_jobs)  # tenant's share waits for ever
                result = self.policy.optimize_within(jobs, cluster, now, plan.budgets)
            else:
                admitted, waits, plan = self.quota.admit(jobs, plan, cluster, sizes_jobs)
                result = self.policy.optimize(admitted, cluster, now) if admitted else PolicyResult({})
        names = {job.name for job in jobs}
        allocations = {name: alloc for name, alloc in result.allocations.items() if name in names and any(alloc)}
        reasons, due = {**result.reasons, **waits}, None
        if self.lease is not None:
            sharing = self.policy.avoids_sharing
            ended = self.quota.reclaimable(jobs, plan, cluster) if self.quota is not None and plan else set()
            allocations, overruled, due = keep_leases(jobs, allocations, cluster, now, self.lease, sharing, ended)
            reasons.update(overruled)
        if self.quota is not None and plan is not None:
            allocations, clipped = self.quota.enforce(jobs, allocations, plan, cluster, sizes_jobs)
            reasons.update(clipped)
        validate_allocations(cluster, allocations, avoid_sharing=self.policy.avoids_sharing)
        check_whole_replicas(jobs, allocations, cluster)
        decisions = diff(jobs, allocations, cluster, result.batch)
        self.backend.apply(decisions, now)
        return RoundResult(now, tuple(decisions), allocations, reasons, due, plan)
