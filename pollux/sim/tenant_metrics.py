"""What a simulation with tenants measures: per tenant, the GPU-time it received against the GPU-time it was entitled
to (Astraea's long-term GPU-time fairness), how often its guarantee was held, and how long taking it back took.

Integrated on the rounds' grid (docs/design.md, "Tenants"): the simulator hands GPUs out and takes them back only at
rounds, so round k at t_k decides what holds over [t_k, t_k+1). For tenant i,

    entitled_i = Σ_k Σ_type entitled_k[i][type] × (t_k+1 − t_k)
    received_i = Σ_k Σ_type held_k[i][type] × (t_k+1 − t_k)

with `entitled_k` the quota layer's entitlement of round k (fractional GPUs, `pollux.tenants.entitlements`) and
`held_k` the GPUs its jobs hold after round k's decisions, GPUs still restoring included. A round without active
jobs adds nothing to either.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pollux.quota import RoundQuota
from pollux.sim.metrics import JobRecord
from pollux.tenants import Tenant, Tenants

HOUR_S = 3600.0


@dataclass(frozen=True)
class TenantRound:
    """One round as the tenants saw it: the quota layer's picture, and what each tenant held after the decisions."""

    quota: RoundQuota
    held: Mapping[str, Mapping[str, int]]  # GPUs per tenant and type after the round, restores included
    length_s: float  # until the next round

    @property
    def now(self) -> float:
        return self.quota.now


def guaranteed_types(tenant: Tenant, quota: RoundQuota) -> list[str]:
    """The GPU types on which the tenant's demand reached its guarantee this round: those where it is entitled to at
    least its guarantee. Entitlement gives a guarantee in full exactly where the tenant's demand reaches it, counting
    a job that may run on several types toward one type's guarantee only (`pollux.tenants.entitlements`)."""
    entitled = quota.entitled.get(tenant.name, {})
    return [t for t, g in tenant.guaranteed.items() if g > 0 and entitled.get(t, 0.0) >= g - 1e-9]


def guarantee_held(tenant: Tenant, step: TenantRound) -> bool | None:
    """Whether the tenant held its guarantee on every type where its demand reached it; None where it reached none."""
    types = guaranteed_types(tenant, step.quota)
    if not types:
        return None
    held = step.held.get(tenant.name, {})
    return all(held.get(t, 0) >= tenant.guarantee_on(t) for t in types)


def tenant_summary(
    tenants: Tenants, rounds: Sequence[TenantRound], jobs: Sequence[JobRecord]
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Per tenant (file order): `jobs`, `avg_jct_s`, `gpu_hours_received`, `gpu_hours_entitled`,
    `guarantee_held_share` (NaN where its demand never reached its guarantee) and `max_rounds_to_reclaim`; and the
    run's `tenant_min_fairness` and `tenant_jain` over the received/entitled ratios of the tenants entitled to any."""
    per_tenant: dict[str, dict[str, float]] = {}
    ratios = []
    for tenant in tenants.tenants:
        name = tenant.name
        entitled = sum(sum(r.quota.entitled.get(name, {}).values()) * r.length_s for r in rounds)
        received = sum(sum(r.held.get(name, {}).values()) * r.length_s for r in rounds)
        held = [guarantee_held(tenant, r) for r in rounds]
        judged = [h for h in held if h is not None]
        jct = [j.jct_s for j in jobs if j.tenant == name and j.jct_s is not None]
        per_tenant[name] = {
            "jobs": float(sum(j.tenant == name for j in jobs)),
            "avg_jct_s": float(np.mean(jct)) if jct else math.nan,
            "gpu_hours_received": received / HOUR_S,
            "gpu_hours_entitled": entitled / HOUR_S,
            "guarantee_held_share": float(np.mean(judged)) if judged else math.nan,
            "max_rounds_to_reclaim": float(_longest_run(held)),
        }
        if entitled > 0:
            ratios.append(received / entitled)
    ratio = np.array(ratios)
    overall = {
        "tenant_min_fairness": float(ratio.min()) if ratio.size else math.nan,
        "tenant_jain": float(ratio.sum() ** 2 / (ratio.size * (ratio**2).sum())) if np.any(ratio > 0) else math.nan,
    }
    return per_tenant, overall


def _longest_run(held: Sequence[bool | None]) -> int:
    """The most consecutive rounds in which the demand reached the guarantee but the tenant held less."""
    longest = run = 0
    for value in held:
        run = run + 1 if value is False else 0
        longest = max(longest, run)
    return longest
