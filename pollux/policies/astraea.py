"""Astraea (Ye et al., TPDS'22): Long-Term GPU-time Fairness between tenants, then between jobs, under leases.

Fairness is judged on GPU-time (GPUs × seconds) received against what was entitled, at two levels (docs/design.md,
"Astraea"). Each round, a two-phase pick hands out GPUs: (1) the tenant furthest below its entitlement, i.e. with the
least GPU-time per GPU of its share (`tenant_usage_s`, counting the GPUs it is given this round for a lease ahead, so
tenants take turns), then (2) its job with the least GPU-time (ties: earlier submitted, then name). A job runs on its
requested GPUs (rigid, as in the paper), on one GPU type its tenant still has budget and free GPUs of, consolidated
on the fewest nodes where the free GPUs allow, else spread.

Leases: a job keeps its GPUs for `lease_s` from when its allocation began (`JobView.allocated_at_s`); only then does
the pick re-decide it: chosen again, it stays where it is; otherwise it is preempted for the job that was. A lease
never holds a tenant above its budget: where budgets fall below what leased jobs hold, its leased jobs with the most
GPU-time yield first.

Pure: the round is a function of the views and the budgets; nothing is remembered between rounds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import ClassVar

from pollux.cluster import Allocation, Cluster, free_gpus, num_gpus
from pollux.errors import SpecError
from pollux.policies.base import JobView, Policy, PolicyResult
from pollux.policies.placement import (
    allowed_types,
    fixed_batches,
    largest_type_gpus,
    never_fits,
    of_type,
    place_consolidated,
    place_most_free,
    take,
)

# Ten of the engine's 60 s rounds: a restart (30 s restore by default) costs at most 5% of a lease, and a waiting
# job of a tenant below its entitlement waits at most one lease for GPUs others hold.
DEFAULT_LEASE_S = 600.0

Budgets = Mapping[str, Mapping[str, int]]  # tenant -> GPU type -> whole GPUs


def job_priority(job: JobView) -> tuple[float, float, str]:
    """Within a tenant: least GPU-time received first (ties: earlier submitted, then name)."""
    return job.attained_service_gpu_s, job.submit_time_s, job.name


def tenant_usage_s(received_gpu_s: float, given_gpus: int, share_gpus: int, lease_s: float) -> float:
    """GPU-time a tenant will have received by the end of the coming lease, per GPU of its share: the tenant
    furthest below its entitlement has the least. A tenant with no share comes last."""
    if share_gpus <= 0:
        return float("inf")
    return (received_gpu_s + lease_s * given_gpus) / share_gpus


class AstraeaPolicy(Policy):
    """Two-phase pick (tenant, then job) by long-term GPU-time, rigid GPU counts, leases of `lease_s`."""

    name: ClassVar[str] = "astraea"
    elastic_gpus: ClassVar[bool] = False  # runs each job at its requested GPU count
    tenant_aware: ClassVar[bool] = True

    def __init__(self, lease_s: float = DEFAULT_LEASE_S) -> None:
        if not lease_s > 0:
            raise SpecError(f"astraea lease_s must be a number of seconds > 0, got {lease_s}")
        self.lease_s = float(lease_s)

    @property
    def uses_throughput_model(self) -> bool:
        return False

    def optimize(self, jobs: Sequence[JobView], cluster: Cluster, now: float) -> PolicyResult:
        """Without a quota layer every tenant may use the whole cluster: equal shares, so the tenant with the least
        GPU-time goes first."""
        capacity = {gpu_type: cluster.gpus_of_type(gpu_type) for gpu_type in cluster.gpu_types}
        return self.optimize_within(jobs, cluster, now, {job.tenant: capacity for job in jobs})

    def optimize_within(self, jobs: Sequence[JobView], cluster: Cluster, now: float, budgets: Budgets) -> PolicyResult:
        books = _Books(cluster, budgets, jobs)
        reasons: dict[str, str] = {}
        kept: dict[str, Allocation] = {}
        leased = {job.name: gpu_type for job in jobs if (gpu_type := self.leased_type(job, cluster, now))}
        for job in sorted((j for j in jobs if j.name in leased), key=job_priority):  # most GPU-time yields first
            if books.fits(job, leased[job.name]):
                books.give(job, leased[job.name])
                kept[job.name] = job.allocation
            else:
                reasons[job.name] = f"waiting: {books.over_budget(job, leased[job.name])}"
        books.next_lease_end_in_s = min((self.lease_left_s(job, now) for job in jobs if job.name in kept), default=None)
        usage = {t: tenant_usage_s(books.received[t], 0, books.share[t], self.lease_s) for t in books.tenants}
        queues = {
            tenant: deque(sorted((j for j in jobs if j.tenant == tenant and j.name not in leased), key=job_priority))
            for tenant in books.tenants
        }
        queues = {tenant: queue for tenant, queue in queues.items() if queue}
        chosen: list[tuple[JobView, str]] = []
        while queues:  # phase 1: the tenant furthest below its entitlement; phase 2: its job with least GPU-time
            tenant = min(queues, key=lambda t: (books.usage(t, self.lease_s), t))
            job = queues[tenant].popleft()
            if not queues[tenant]:
                del queues[tenant]
            gpu_type, why = books.choose_type(job)
            if gpu_type is None:
                reasons[job.name] = f"waiting: {why}"
                continue
            books.give(job, gpu_type)
            chosen.append((job, gpu_type))
        allocations = {**kept, **_place(cluster, kept, chosen)}
        return PolicyResult(
            allocations=allocations,
            reasons=reasons,
            batch=fixed_batches(jobs, allocations, cluster),
            info={"tenant_usage_s": usage},
        )

    def leased_type(self, job: JobView, cluster: Cluster, now: float) -> str | None:
        """The GPU type of the job's GPUs if it holds them under a lease begun less than `lease_s` ago (at its
        request, on a type it may use), else None: its lease is over, or it holds none."""
        return _runs_as_requested(job, cluster) if self.lease_left_s(job, now) > 0 else None

    def lease_left_s(self, job: JobView, now: float) -> float:
        """Seconds left of the lease on the GPUs the job holds: `lease_s` from when it got them; 0 once over (or
        when it holds none)."""
        if job.allocated_at_s is None or not any(job.allocation):
            return 0.0
        return max(job.allocated_at_s + self.lease_s - now, 0.0)


def _need(job: JobView) -> int:
    return max(job.requested_gpus, 1)


def _runs_as_requested(job: JobView, cluster: Cluster) -> str | None:
    """The GPU type the job holds its requested GPUs on (one it may use), else None."""
    allocation = tuple(job.allocation)
    if len(allocation) != cluster.num_nodes or num_gpus(allocation) != _need(job) or min(allocation) < 0:
        return None
    gpu_type = cluster.allocation_type(allocation)
    return gpu_type if gpu_type is not None and job.may_run_on(gpu_type) else None


class _Books:
    """One round's accounts: GPUs each tenant may still take per type (its budget less what it was given), GPUs of
    each type not yet given, and each tenant's GPU-time received and GPUs given this round."""

    def __init__(self, cluster: Cluster, budgets: Budgets, jobs: Sequence[JobView]) -> None:
        self.cluster = cluster
        self.budgets = budgets
        self.tenants = sorted({job.tenant for job in jobs})
        types = cluster.gpu_types
        self.left = {t: {g: budgets.get(t, {}).get(g, 0) for g in types} for t in self.tenants}
        self.share = {t: sum(self.left[t].values()) for t in self.tenants}
        self.free = {g: cluster.gpus_of_type(g) for g in types}
        self.received = {t: sum(j.attained_service_gpu_s for j in jobs if j.tenant == t) for t in self.tenants}
        self.given = dict.fromkeys(self.tenants, 0)
        self.next_lease_end_in_s: float | None = None  # for the reason a job waits: when leased GPUs come free

    def usage(self, tenant: str, lease_s: float) -> float:
        return tenant_usage_s(self.received[tenant], self.given[tenant], self.share[tenant], lease_s)

    def fits(self, job: JobView, gpu_type: str) -> bool:
        need = _need(job)
        return self.left[job.tenant][gpu_type] >= need and self.free[gpu_type] >= need

    def give(self, job: JobView, gpu_type: str) -> None:
        need = _need(job)
        self.left[job.tenant][gpu_type] -= need
        self.free[gpu_type] -= need
        self.given[job.tenant] += need

    def over_budget(self, job: JobView, gpu_type: str) -> str:
        budget = self.budgets.get(job.tenant, {}).get(gpu_type, 0)
        return f"tenant {job.tenant} is over its budget of {budget} {gpu_type} GPUs this round"

    def choose_type(self, job: JobView) -> tuple[str | None, str]:
        """The type the job runs on this round: the one it holds if it still fits there (no restart), else the
        allowed type with most GPUs both free and within its tenant's budget (ties: cluster order); or why none."""
        need = _need(job)
        capacity = largest_type_gpus(self.cluster, job)
        if need > capacity:
            return None, f"needs {need} GPUs, {never_fits(self.cluster, capacity)}"
        types = [g for g in allowed_types(self.cluster, job) if self.fits(job, g)]
        held = _runs_as_requested(job, self.cluster)
        if held in types:
            return held, ""
        if types:
            return max(types, key=lambda g: min(self.left[job.tenant][g], self.free[g])), ""
        room = max(self.left[job.tenant][g] for g in allowed_types(self.cluster, job))
        if room < need:
            return (
                None,
                f"needs {need} GPUs, tenant {job.tenant} has {room} left of its budget on any one type it may use",
            )
        spare = max(self.free[g] for g in allowed_types(self.cluster, job))
        lease = "" if self.next_lease_end_in_s is None else f"; the next lease ends in {self.next_lease_end_in_s:.0f} s"
        return None, f"needs {need} GPUs of one type, {spare} free beside leased jobs and those picked first{lease}"


def _place(
    cluster: Cluster, kept: Mapping[str, Allocation], chosen: Sequence[tuple[JobView, str]]
) -> dict[str, Allocation]:
    """Where the chosen jobs run: one still on its GPUs of its chosen type stays there; the others, in the order
    chosen, on the fewest nodes of their type that hold them, else on the nodes with most free GPUs. Every one fits:
    `_Books` counted its GPUs free on its type."""
    staying = {job.name: job.allocation for job, t in chosen if _runs_as_requested(job, cluster) == t}
    placed: dict[str, Allocation] = dict(staying)
    free = free_gpus(cluster, {**kept, **staying})
    for job, gpu_type in chosen:
        if job.name in staying:
            continue
        on_type = of_type(cluster, free, gpu_type)
        alloc = place_consolidated(on_type, _need(job), of_type(cluster, cluster.node_gpus, gpu_type))
        alloc = alloc or place_most_free(on_type, _need(job))
        assert alloc is not None, f"{job.name}: {_need(job)} {gpu_type} GPUs were counted free"
        take(free, alloc)
        placed[job.name] = alloc
    return placed
