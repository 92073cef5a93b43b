"""Tenants: the teams that share a cluster, their GPU quotas per type, and what each is entitled to every round.

A cluster serves teams, not only jobs (docs/design.md, "Tenants"). A tenant has a `weight` (its share of what others
leave idle, as a Volcano queue's weight or a Kueue cohort's fair-sharing weight), a `guaranteed` count of GPUs per
GPU type (Kueue's nominal quota per resource flavor), an optional hard cap per type (`max`: Volcano's capability),
and whether it may `borrow` idle GPUs beyond its guarantee. Read from a TOML file, one `[[tenant]]` table each.

**Entitlement** (`entitlements`): each round, per GPU type, a tenant is entitled to its guarantee where its demand
reaches it, plus a weighted share of what the others leave idle, by water-filling (a tenant never gets more than it
can use; what it cannot use flows to the others). The weight of a borrower is scaled by Slurm's classic fair-share
factor 2^(−U/S) (U: its share of the decayed GPU-time of all tenants, S: its share of the weights; `UsageLedger`), so
a tenant that has borrowed much yields first. `budgets` rounds entitlements to whole GPUs per tenant and type: what
the quota layer (`pollux.quota`) holds every policy to.

Pure: no I/O but `read_tenants`, no clock (time comes in as `now`).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pollux.cluster import Cluster
from pollux.errors import SpecError

DEFAULT_TENANT = "default"  # the tenant of a job that names none, and the one tenant of a cluster without a file
DEFAULT_HALF_LIFE_S = 7 * 24 * 3600.0  # Slurm's PriorityDecayHalfLife default: 7 days
TENANT_KEYS = ("name", "weight", "guaranteed", "max", "borrow")
FILE_KEYS = ("tenant", "usage_half_life_h")


@dataclass(frozen=True)
class Tenant:
    """One team: its weight, GPUs guaranteed per type, optional hard cap per type, and whether it may borrow."""

    name: str
    weight: float = 1.0
    guaranteed: Mapping[str, int] = field(default_factory=dict)
    max_gpus: Mapping[str, int] = field(default_factory=dict)  # per type; a type not named: no cap
    borrow: bool = True

    def guarantee_on(self, gpu_type: str) -> int:
        return self.guaranteed.get(gpu_type, 0)

    def cap_on(self, gpu_type: str, capacity: int) -> int:
        """The most GPUs of `gpu_type` it may ever hold: its `max`, else the type's capacity; its guarantee when it
        may not borrow."""
        cap = min(self.max_gpus.get(gpu_type, capacity), capacity)
        return cap if self.borrow else min(cap, self.guarantee_on(gpu_type))


@dataclass(frozen=True)
class Tenants:
    """Every tenant of a cluster, in file order, and the half-life of the usage that weighs their borrowing."""

    tenants: tuple[Tenant, ...]
    usage_half_life_s: float = DEFAULT_HALF_LIFE_S

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tenants)

    def get(self, name: str) -> Tenant:
        for tenant in self.tenants:
            if tenant.name == name:
                return tenant
        raise SpecError(f"unknown tenant {name!r}; tenants: {', '.join(self.names)}")

    def check_job(self, job: str, tenant: str) -> None:
        """Refuse a job of a tenant the cluster does not have, listing the ones it has."""
        if tenant not in self.names:
            raise SpecError(f"job {job}: unknown tenant {tenant!r}; tenants: {', '.join(self.names)}")


def single_tenant(cluster: Cluster) -> Tenants:
    """No tenants file: one tenant owning everything (the quota layer is then skipped: results stay as they were)."""
    return Tenants((Tenant(DEFAULT_TENANT, guaranteed={t: cluster.gpus_of_type(t) for t in cluster.gpu_types}),))


# -- the file ------------------------------------------------------------------------------------------------------
def read_tenants(path: str | Path, cluster: Cluster) -> Tenants:
    """Read and check a tenants TOML file against `cluster`; every mistake is one `SpecError` naming the file, the
    tenant and the field."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise SpecError(f"tenants file {path} does not exist") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise SpecError(f"tenants file {path}: not readable TOML ({error})") from None
    return parse_tenants(data, cluster, where=str(path))


def parse_tenants(data: Mapping[str, object], cluster: Cluster, where: str = "tenants") -> Tenants:
    """Tenants from the parsed TOML (`read_tenants`'s checks)."""
    unknown = sorted(set(data) - set(FILE_KEYS))
    if unknown:
        raise SpecError(f"{where}: unknown key {unknown[0]!r}; a tenants file has [[tenant]] tables only")
    tables = data.get("tenant")
    if not isinstance(tables, list) or not tables:
        raise SpecError(f"{where}: no [[tenant]] table; add one per team (name, weight, guaranteed, max, borrow)")
    half_life = data.get("usage_half_life_h", DEFAULT_HALF_LIFE_S / 3600)
    if isinstance(half_life, bool) or not isinstance(half_life, int | float) or not half_life > 0:
        raise SpecError(f"{where}: usage_half_life_h must be a number of hours > 0, got {half_life!r}")
    tenants = [_parse_tenant(table, i, cluster, where) for i, table in enumerate(tables)]
    seen: set[str] = set()
    for tenant in tenants:
        if tenant.name in seen:
            raise SpecError(f"{where}: tenant name {tenant.name!r} appears twice; names must be unique")
        seen.add(tenant.name)
    for gpu_type in cluster.gpu_types:
        total = sum(t.guarantee_on(gpu_type) for t in tenants)
        capacity = cluster.gpus_of_type(gpu_type)
        if total > capacity:
            raise SpecError(
                f"{where}: guaranteed.{gpu_type} adds up to {total} GPUs over all tenants but the cluster has "
                f"{capacity} of type {gpu_type}; lower the guarantees"
            )
    return Tenants(tuple(tenants), float(half_life) * 3600)


def _parse_tenant(table: object, index: int, cluster: Cluster, where: str) -> Tenant:
    if not isinstance(table, dict):
        raise SpecError(f"{where}: tenant #{index + 1} must be a [[tenant]] table")
    name = table.get("name")
    if not isinstance(name, str) or not name.strip():
        raise SpecError(f"{where}: tenant #{index + 1}: name must be a non-empty string")
    at = f"{where}: tenant {name!r}"
    unknown = sorted(set(table) - set(TENANT_KEYS))
    if unknown:
        raise SpecError(f"{at}: unknown field {unknown[0]!r}; fields: {', '.join(TENANT_KEYS)}")
    weight = table.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight) or weight <= 0:
        raise SpecError(f"{at}: weight must be a number > 0, got {weight!r}")
    borrow = table.get("borrow", True)
    if not isinstance(borrow, bool):
        raise SpecError(f"{at}: borrow must be true or false, got {borrow!r}")
    guaranteed = _per_type(table.get("guaranteed", {}), "guaranteed", at, cluster)
    caps = _per_type(table.get("max", {}), "max", at, cluster)
    for gpu_type, count in guaranteed.items():
        if count > cluster.gpus_of_type(gpu_type):
            raise SpecError(
                f"{at}: guaranteed.{gpu_type} = {count} is above the cluster's {cluster.gpus_of_type(gpu_type)} GPUs "
                f"of type {gpu_type}"
            )
        if gpu_type in caps and caps[gpu_type] < count:
            raise SpecError(f"{at}: max.{gpu_type} = {caps[gpu_type]} is below guaranteed.{gpu_type} = {count}")
    return Tenant(name, float(weight), guaranteed, caps, borrow)


def _per_type(value: object, key: str, at: str, cluster: Cluster) -> dict[str, int]:
    if not isinstance(value, dict):
        raise SpecError(f"{at}: {key} must be a table of GPUs per type, e.g. {key} = {{ aws = 8 }}")
    counts: dict[str, int] = {}
    for gpu_type, count in value.items():
        if gpu_type not in cluster.gpu_types:
            raise SpecError(
                f"{at}: {key}.{gpu_type}: unknown GPU type; this cluster has {', '.join(cluster.gpu_types)}"
            )
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise SpecError(f"{at}: {key}.{gpu_type} must be a whole number of GPUs >= 0, got {count!r}")
        counts[gpu_type] = count
    return counts


# -- usage over time -----------------------------------------------------------------------------------------------
@dataclass
class UsageLedger:
    """Each tenant's GPU-seconds, decayed with a half-life (Slurm's fair-share usage; Astraea's long-term GPU-time)."""

    half_life_s: float = DEFAULT_HALF_LIFE_S
    usage_gpu_s: dict[str, float] = field(default_factory=dict)
    last_s: float | None = None

    def record(self, held_gpus: Mapping[str, int], now: float) -> None:
        """Decay what was recorded, then add `held_gpus` (per tenant) held since the last record."""
        if self.last_s is not None and now > self.last_s:
            dt = now - self.last_s
            decay = 0.5 ** (dt / self.half_life_s)
            for name in self.usage_gpu_s:
                self.usage_gpu_s[name] *= decay
            for name, gpus in held_gpus.items():
                self.usage_gpu_s[name] = self.usage_gpu_s.get(name, 0.0) + gpus * dt
        self.last_s = now if self.last_s is None else max(self.last_s, now)

    def fair_share_factors(self, tenants: Tenants) -> dict[str, float]:
        """Slurm's classic fair-share factor per tenant, 2^(−U/S): 1 for no usage, 0.5 at its share, less beyond."""
        total_usage = sum(self.usage_gpu_s.values())
        total_weight = sum(t.weight for t in tenants.tenants)
        if total_usage <= 0:
            return {t.name: 1.0 for t in tenants.tenants}
        return {
            t.name: 2.0 ** (-(self.usage_gpu_s.get(t.name, 0.0) / total_usage) / (t.weight / total_weight))
            for t in tenants.tenants
        }


# -- entitlement -----------------------------------------------------------------------------------------------------
Demand = Mapping[str, Mapping[str, float]]  # tenant -> GPU type -> GPUs its active jobs could use there


def entitlements(
    tenants: Tenants,
    demand: Demand,
    capacity: Mapping[str, int],
    total_demand: Mapping[str, float] | None = None,
    factors: Mapping[str, float] | None = None,
) -> dict[str, dict[str, float]]:
    """GPUs per tenant and type each tenant is entitled to this round (fractional; see the module docstring).

    `demand[tenant][type]`: what its active jobs could use on that type (a job that may run on several types counts
    on each); `total_demand[tenant]`: what they could use in all (so a tenant is not entitled, across types, to more
    than it can use; default: the sum over types). First every tenant's guarantee, as far as its remaining demand
    reaches, type by type in cluster order; then, type by type, what is left is water-filled among the tenants that
    may borrow and still have demand, in proportion to weight × fair-share factor, each up to its cap."""
    factors = factors or {}
    remaining = {
        t.name: float(total_demand[t.name]) if total_demand is not None else sum(demand.get(t.name, {}).values())
        for t in tenants.tenants
    }
    result: dict[str, dict[str, float]] = {t.name: {} for t in tenants.tenants}
    for gpu_type, cap in capacity.items():  # guarantees first, on every type
        for t in tenants.tenants:
            want = min(demand.get(t.name, {}).get(gpu_type, 0.0), remaining[t.name], t.cap_on(gpu_type, cap))
            given = min(float(t.guarantee_on(gpu_type)), want)
            result[t.name][gpu_type] = given
            remaining[t.name] -= given
    for gpu_type, cap in capacity.items():  # then what is idle, by weight
        idle = cap - sum(result[t.name][gpu_type] for t in tenants.tenants)
        room = {
            t.name: max(
                min(demand.get(t.name, {}).get(gpu_type, 0.0), float(t.cap_on(gpu_type, cap)))
                - result[t.name][gpu_type],
                0.0,
            )
            for t in tenants.tenants
        }
        room = {name: min(r, remaining[name]) for name, r in room.items()}
        weights = {t.name: t.weight * factors.get(t.name, 1.0) for t in tenants.tenants}
        for name, share in _water_fill(idle, room, weights).items():
            result[name][gpu_type] += share
            remaining[name] -= share
    return result


def _water_fill(amount: float, room: Mapping[str, float], weights: Mapping[str, float]) -> dict[str, float]:
    """Split `amount` in proportion to `weights`, none above its `room`; what a full one cannot take goes to others."""
    given = dict.fromkeys(room, 0.0)
    open_ = {name for name, r in room.items() if r > 1e-9 and weights.get(name, 0.0) > 0}
    while amount > 1e-9 and open_:
        total = sum(weights[name] for name in open_)
        step = {name: amount * weights[name] / total for name in open_}
        full = {name for name in open_ if step[name] >= room[name] - given[name] - 1e-12}
        if not full:
            for name in open_:
                given[name] += step[name]
            break
        for name in sorted(full):
            amount -= room[name] - given[name]
            given[name] = room[name]
        open_ -= full
    return given


def budgets(entitled: Mapping[str, Mapping[str, float]], capacity: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """Whole GPUs per tenant and type: each entitlement rounded down, then the GPUs left over handed out by the
    largest remainder (ties: file order), never above a type's capacity nor above an entitlement's ceiling."""
    result = {name: {t: math.floor(e + 1e-9) for t, e in per_type.items()} for name, per_type in entitled.items()}
    for gpu_type, cap in capacity.items():
        names = [n for n in entitled if gpu_type in entitled[n]]
        spare = min(cap, math.floor(sum(entitled[n][gpu_type] for n in names) + 1e-9))
        spare -= sum(result[n][gpu_type] for n in names)
        order = sorted(names, key=lambda n: -(entitled[n][gpu_type] - result[n][gpu_type]))
        for name in order:
            if spare <= 0:
                break
            if entitled[name][gpu_type] - result[name][gpu_type] > 1e-9:
                result[name][gpu_type] += 1
                spare -= 1
    return result


def held_by_tenant(pairs: Iterable[tuple[str, str | None, int]]) -> dict[str, dict[str, int]]:
    """GPUs held per tenant and type from (tenant, type, GPUs) of each job."""
    held: dict[str, dict[str, int]] = {}
    for tenant, gpu_type, gpus in pairs:
        if gpus > 0 and gpu_type is not None:
            per_type = held.setdefault(tenant, {})
            per_type[gpu_type] = per_type.get(gpu_type, 0) + gpus
    return held
