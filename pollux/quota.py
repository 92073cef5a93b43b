"""The quota layer: every policy runs under the tenants' GPU budgets, as Kueue sits in front of any scheduler.

Each round (`QuotaLayer.plan`) the layer records what each tenant held since the last round (its decayed usage),
measures each tenant's demand per GPU type (what its active jobs could use: their GPU bound for a policy that sizes
jobs, their request for one that does not), and turns the tenants' guarantees, weights and usage into entitlements
and whole-GPU budgets (`pollux.tenants`). Then:

- a tenant-aware policy (`Policy.tenant_aware`: `pollux`, `astraea`) searches within the budgets itself
  (`Policy.optimize_within`);
- any other policy sees only the jobs admitted under their tenant's budget (`admit`: a fixed-size job when its
  request fits what its tenant has left on one GPU type, in the tenant's order: running jobs first, then by
  submission, a waiting one then allowed to start on that type only; an elastic job with its GPU bound cut to its
  tenant's budget), and its allocations are held to the budgets (`enforce`);
- budgets are fractions of GPUs rounded, not sizes of jobs: a tenant whose next fixed-size job asks for more than
  its budget has left would wait while its GPUs idle (and when every tenant is so placed, the cluster idles for
  ever). So what the first pass of admission leaves unused is lent, as Kueue's cohorts lend unused quota: fixed-size
  jobs of tenants that may borrow, running ones first, then the waiting ones strictly by submission (the first that
  does not fit stops the lending, so a large job is not starved by smaller later ones), and their tenants' budgets
  grow to what they use this round;
- a job of a tenant holding more than its budget on a type (GPUs it borrowed that their owner now needs) loses its
  lease (`reclaimable`), and `enforce` takes the excess back: from elastic jobs by shrinking the largest first (each
  keeps at least one GPU, and its minimum), preempting only where nothing can shrink; from fixed-size jobs by
  stopping the latest submitted first. Jobs the round starts or moves give back before jobs that keep their GPUs
  (those would pay a restart of their own).

Without a tenants file there is no layer at all (the engine skips it), so results stay byte-identical.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from pollux.cluster import Allocation, Cluster, num_gpus
from pollux.policies.base import JobView
from pollux.tenants import Tenants, UsageLedger, budgets, entitlements, held_by_tenant

PerType = dict[str, dict[str, int]]


@dataclass(frozen=True)
class RoundQuota:
    """One round's quota picture: per tenant and GPU type, demand, entitlement (fractional), budget (whole GPUs) and
    what it held when the round began. The simulator's tenant metrics are integrated from these."""

    now: float
    demand: Mapping[str, Mapping[str, float]]
    entitled: Mapping[str, Mapping[str, float]]
    budgets: Mapping[str, Mapping[str, int]]
    held: Mapping[str, Mapping[str, int]]

    def budget(self, tenant: str, gpu_type: str) -> int:
        return self.budgets.get(tenant, {}).get(gpu_type, 0)

    def over_budget(self, tenant: str, gpu_type: str) -> int:
        """GPUs of `gpu_type` the tenant held beyond its budget when the round began."""
        return max(self.held.get(tenant, {}).get(gpu_type, 0) - self.budget(tenant, gpu_type), 0)


class QuotaLayer:
    """Budgets per tenant and GPU type each round, admission in front of a policy and enforcement after it."""

    def __init__(self, tenants: Tenants) -> None:
        self.tenants = tenants
        self.ledger = UsageLedger(tenants.usage_half_life_s)

    def plan(self, jobs: Sequence[JobView], cluster: Cluster, now: float, sizes_jobs: bool) -> RoundQuota:
        """This round's demand, entitlements and budgets; `sizes_jobs`: the policy chooses GPU counts (a job's demand
        is its GPU bound), else each job's demand is its request."""
        held = held_by_tenant(
            (job.tenant, cluster.allocation_type(job.allocation), num_gpus(job.allocation)) for job in jobs
        )
        self.ledger.record({name: sum(per.values()) for name, per in held.items()}, now)
        capacity = {t: cluster.gpus_of_type(t) for t in cluster.gpu_types}
        demand: dict[str, dict[str, float]] = {name: dict.fromkeys(capacity, 0.0) for name in self.tenants.names}
        total: dict[str, float] = dict.fromkeys(self.tenants.names, 0.0)
        for job in jobs:
            want = float(job.max_gpus if sizes_jobs else job.requested_gpus)
            total[job.tenant] = total.get(job.tenant, 0.0) + want
            per_type = demand.setdefault(job.tenant, dict.fromkeys(capacity, 0.0))
            for gpu_type in capacity:
                if job.may_run_on(gpu_type):
                    per_type[gpu_type] += want
        for per_type in demand.values():
            for gpu_type, cap in capacity.items():
                per_type[gpu_type] = min(per_type[gpu_type], float(cap))
        factors = self.ledger.fair_share_factors(self.tenants)
        entitled = entitlements(self.tenants, demand, capacity, total, factors)
        return RoundQuota(now, demand, entitled, budgets(entitled, capacity), held)

    # -- in front of a tenant-unaware policy ---------------------------------------------------------------------
    def admit(
        self, jobs: Sequence[JobView], plan: RoundQuota, cluster: Cluster, sizes_jobs: bool
    ) -> tuple[list[JobView], dict[str, str], RoundQuota]:
        """The jobs a tenant-unaware policy may consider this round, why each other job waits, and the plan with
        the budgets grown by what fixed-size jobs borrowed of the GPUs admission left unused."""
        admitted: list[JobView] = []
        reasons: dict[str, str] = {}
        left = {name: dict(plan.budgets.get(name, {})) for name in self.tenants.names}
        order = sorted(jobs, key=lambda j: (j.tenant, not any(j.allocation), j.submit_time_s, j.name))
        for job in order:
            room = left.setdefault(job.tenant, {})
            types = [t for t in cluster.gpu_types if job.may_run_on(t)]
            if sizes_jobs:
                cap = sum(plan.budget(job.tenant, t) for t in types)
                if cap >= max(job.min_gpus, 1):
                    admitted.append(replace(job, max_gpus=max(min(job.max_gpus, cap), job.min_gpus, 1)))
                    continue
            else:
                held_type = cluster.allocation_type(job.allocation)
                candidates = [held_type] if held_type is not None else sorted(types, key=lambda t: -room.get(t, 0))
                fits = [t for t in candidates if room.get(t, 0) >= job.requested_gpus]
                if fits:
                    room[fits[0]] -= job.requested_gpus
                    admitted.append(_pinned(job, fits[0], held_type))
                    continue
            budget = sum(plan.budget(job.tenant, t) for t in types)
            reasons[job.name] = f"waiting: tenant {job.tenant} is at its quota ({budget} GPUs this round)"
        if not sizes_jobs:
            plan = self._lend_unused(jobs, admitted, reasons, left, plan, cluster)
        by_name = {j.name: j for j in admitted}
        return [by_name[j.name] for j in jobs if j.name in by_name], reasons, plan

    def _lend_unused(
        self,
        jobs: Sequence[JobView],
        admitted: list[JobView],
        reasons: dict[str, str],
        left: Mapping[str, Mapping[str, int]],
        plan: RoundQuota,
        cluster: Cluster,
    ) -> RoundQuota:
        """Admit waiting fixed-size jobs on the GPUs the budgets' admission left unused (module docstring); in the
        plan returned, a tenant that borrowed has a budget of what its admitted jobs use on the type."""
        spare = {t: cluster.gpus_of_type(t) for t in cluster.gpu_types}
        used: dict[str, dict[str, int]] = {}
        for name, per_type in plan.budgets.items():
            for t, budget in per_type.items():
                taken = budget - left.get(name, {}).get(t, budget)
                spare[t] -= taken
                used.setdefault(name, {})[t] = taken
        grown = {name: dict(per_type) for name, per_type in plan.budgets.items()}
        order = sorted(
            (j for j in jobs if j.name in reasons), key=lambda j: (not any(j.allocation), j.submit_time_s, j.name)
        )
        for job in order:
            tenant = self.tenants.get(job.tenant)
            if not tenant.borrow:
                continue
            held_type = cluster.allocation_type(job.allocation)
            types = [held_type] if held_type is not None else [t for t in cluster.gpu_types if job.may_run_on(t)]
            fits = [
                t
                for t in sorted(types, key=lambda t: -spare[t])
                if spare[t] >= job.requested_gpus
                and used.get(job.tenant, {}).get(t, 0) + job.requested_gpus <= tenant.cap_on(t, cluster.gpus_of_type(t))
            ]
            if not fits:
                if held_type is None and any(
                    job.requested_gpus <= tenant.cap_on(t, cluster.gpus_of_type(t)) for t in types
                ):
                    break  # strictly by submission: a later job does not pass one that could run
                continue
            gpu_type = fits[0]
            spare[gpu_type] -= job.requested_gpus
            using = used.setdefault(job.tenant, {})
            using[gpu_type] = using.get(gpu_type, 0) + job.requested_gpus
            per_type = grown.setdefault(job.tenant, {})
            per_type[gpu_type] = max(per_type.get(gpu_type, 0), using[gpu_type])
            admitted.append(_pinned(job, gpu_type, held_type))
            del reasons[job.name]
        return replace(plan, budgets=grown) if grown != plan.budgets else plan

    def reclaimable(self, jobs: Sequence[JobView], plan: RoundQuota, cluster: Cluster) -> set[str]:
        """Jobs whose leases end early: those of a tenant holding more than its budget on the type they run on."""
        return {
            job.name
            for job in jobs
            if (t := cluster.allocation_type(job.allocation)) is not None and plan.over_budget(job.tenant, t) > 0
        }

    # -- after any policy ------------------------------------------------------------------------------------------
    def enforce(
        self,
        jobs: Sequence[JobView],
        allocations: Mapping[str, Allocation],
        plan: RoundQuota,
        cluster: Cluster,
        sizes_jobs: bool,
    ) -> tuple[dict[str, Allocation], dict[str, str]]:
        """`allocations` held to the budgets: each tenant's excess on a type taken back (module docstring)."""
        result = dict(allocations)
        reasons: dict[str, str] = {}
        by_name = {job.name: job for job in jobs}
        use: dict[tuple[str, str], list[str]] = {}
        for name, alloc in result.items():
            gpu_type = cluster.allocation_type(alloc)
            if gpu_type is not None and name in by_name:
                use.setdefault((by_name[name].tenant, gpu_type), []).append(name)
        # A job the round moves or starts gives back first: it restarts anyway (or has not started), while cutting
        # a job that keeps its GPUs (a lease, say) would cost it a restart of its own.
        moved = {name for name, alloc in result.items() if name in by_name and alloc != by_name[name].allocation}
        for (tenant, gpu_type), names in sorted(use.items()):
            excess = sum(num_gpus(result[n]) for n in names) - plan.budget(tenant, gpu_type)
            if sizes_jobs:  # shrink the largest first (moved ones before), down to one GPU (or its minimum) each
                while excess > 0:
                    shrinkable = [n for n in names if num_gpus(result[n]) > max(by_name[n].min_gpus, 1) and n in result]
                    if not shrinkable:
                        break
                    name = max(shrinkable, key=lambda n: (n in moved, num_gpus(result[n]), by_name[n].submit_time_s, n))
                    give = min(excess, num_gpus(result[name]) - max(by_name[name].min_gpus, 1))
                    result[name] = _shrink(result[name], give)
                    excess -= give
                    reasons[name] = f"shrunk: tenant {tenant} is over its quota of {gpu_type} GPUs"
            # then stop: moved ones first, the latest submitted first
            for name in sorted(names, key=lambda n: (n not in moved, -by_name[n].submit_time_s, n)):
                if excess <= 0:
                    break
                if name in result:
                    excess -= num_gpus(result.pop(name))
                    reasons[name] = f"waiting: tenant {tenant} is over its quota of {gpu_type} GPUs"
        return result, reasons


def _pinned(job: JobView, gpu_type: str, held_type: str | None) -> JobView:
    """A waiting fixed-size job admitted against its tenant's budget on `gpu_type` may start only there: placed on
    another type by the policy, enforcement would stop it as over that type's budget, round after round (a job left
    waiting for 60 simulated days on an idle typed cluster). A running job keeps its types (a policy may move it)."""
    if held_type is not None or job.gpu_types == (gpu_type,):
        return job
    return replace(job, gpu_types=(gpu_type,))


def _shrink(allocation: Allocation, gpus: int) -> Allocation:
    """`allocation` less `gpus` GPUs, taken from its smallest node shares first (so it spans as few nodes as it can)."""
    counts = list(allocation)
    for node in sorted((n for n, g in enumerate(counts) if g > 0), key=lambda n: (counts[n], -n)):
        take = min(gpus, counts[node])
        counts[node] -= take
        gpus -= take
        if gpus == 0:
            break
    return tuple(counts)
