"""Who may touch what: the one rule every route of the HTTP API (`pollux.runtime.api.ROUTE_TABLE`) is held to.

A request proves itself with a token (or a dashboard session opened with one) and becomes a `Principal`: the admin
(the token `pollux up` writes into the state directory) may do everything; a tenant (a token from `pollux tenant
add`, `pollux.runtime.tokens`) submits, reads, logs, cancels and removes only its own tenant's jobs, sees the others
only as counts per tenant, and may not shut the service down. Refusals are `AccessError`s, answered with 403.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pollux.errors import AccessError
from pollux.runtime.status import JobStatus
from pollux.runtime.store import JobState
from pollux.tenants import DEFAULT_TENANT


@dataclass(frozen=True)
class Principal:
    """Who sent a request: the admin, or one tenant."""

    admin: bool
    tenant: str | None = None

    def __str__(self) -> str:
        return "the admin" if self.admin else f"tenant {self.tenant!r}"


ADMIN = Principal(admin=True)


class Action(StrEnum):
    """What a route does, as the rule sees it (the OpenAPI description names each route's)."""

    READ = "read the service"  # health, the API's description, the dashboard, the list (filtered: `visible`)
    SUBMIT = "submit a job"
    READ_JOB = "read a job"  # its row, history, log, dashboard page
    CHANGE_JOB = "change a job"  # cancel, remove
    LOGIN_LINK = "make a login link"  # for a dashboard session of the same principal
    SHUTDOWN = "shut the service down"


ADMIN_ONLY = frozenset({Action.SHUTDOWN})
OF_A_JOB = frozenset({Action.SUBMIT, Action.READ_JOB, Action.CHANGE_JOB})


def can(principal: Principal, action: Action, job_tenant: str | None = None) -> bool:
    """Whether `principal` may do `action` (to a job of `job_tenant`, for the actions `OF_A_JOB`; None: not yet
    known, e.g. before a submitted spec is read)."""
    if principal.admin:
        return True
    if action in ADMIN_ONLY:
        return False
    return action not in OF_A_JOB or job_tenant is None or job_tenant == principal.tenant


def check(principal: Principal, action: Action, job_tenant: str | None = None, job: str | None = None) -> None:
    """`can`, or the 403's one line."""
    if can(principal, action, job_tenant):
        return
    if job_tenant is None:
        raise AccessError(f"{principal} may not {action}: only the admin token may")
    what = f"job {job!r} of tenant {job_tenant!r}" if job else f"a job of tenant {job_tenant!r}"
    raise AccessError(f"{principal} may not {action}: {what}; a tenant's token reaches only its own tenant's jobs")


def check_enrolled(principal: Principal, tenant_names: Collection[str] | None) -> None:
    """A tenant token is refused while its tenant is not in the service's tenants file (when it runs with one)."""
    if principal.tenant is not None and tenant_names is not None and principal.tenant not in tenant_names:
        raise AccessError(
            f"tenant {principal.tenant!r} has a token but is not in this service's tenants file (tenants: "
            f"{', '.join(tenant_names)}); add it there, or `pollux tenant revoke {principal.tenant}`"
        )


def job_tenant(spec: Mapping[str, Any]) -> str:
    """A job's tenant as its stored spec says (a spec from before tenants names none: the default tenant)."""
    return str(spec.get("tenant") or DEFAULT_TENANT)


def submitted_tenant(principal: Principal, named: str | None) -> str:
    """The tenant of a job `principal` submits whose spec names `named` (None: no tenant): a tenant's own unless
    the spec names another (refused)."""
    tenant = named or principal.tenant or DEFAULT_TENANT
    check(principal, Action.SUBMIT, tenant)
    return tenant


def visible(principal: Principal, jobs: Iterable[JobState]) -> list[JobState]:
    """The jobs `principal` may read."""
    return [job for job in jobs if can(principal, Action.READ_JOB, job_tenant(job.spec))]


def tenant_counts(jobs: Iterable[JobState]) -> dict[str, dict[str, Any]]:
    """Every tenant's unfinished jobs as counts (no names): what a tenant sees of the others, and of itself."""
    counts: dict[str, dict[str, Any]] = {}
    for job in jobs:
        if job.status not in (JobStatus.RUNNING, JobStatus.PENDING):
            continue
        entry = counts.setdefault(job_tenant(job.spec), {"running": 0, "pending": 0, "gpus": 0, "gpus_by_type": {}})
        entry[job.status.value] += 1
        gpus = sum(job.allocation)
        if gpus:
            entry["gpus"] += gpus
            by_type = entry["gpus_by_type"]
            by_type[job.gpu_type or "?"] = by_type.get(job.gpu_type or "?", 0) + gpus
    return dict(sorted(counts.items()))


def overview_for(principal: Principal, overview: dict[str, Any], jobs: Iterable[JobState]) -> dict[str, Any]:
    """The dashboard's overview (`pollux.runtime.views.overview`) as a tenant sees it: its own jobs and the rounds'
    decisions about them; of the others, the GPUs they hold per node (`held_by_others`, no names) and every tenant's
    counts (`tenant_counts`); every tenant's usage against its quota (`tenants`) as the admin sees it."""
    jobs = list(jobs)
    mine = {job.name for job in visible(principal, jobs)}
    held_by_others = [0] * len(overview["cluster"]["nodes"])
    for job in jobs:
        if job.name not in mine:
            for node, gpus in enumerate(job.allocation[: len(held_by_others)]):
                held_by_others[node] += gpus
    decisions = [
        {"at": entry["at"], "decisions": own}
        for entry in overview["decisions"]
        if (own := [decision for decision in entry["decisions"] if decision["job"] in mine])
    ]
    return {
        **overview,
        "jobs": [row for row in overview["jobs"] if row["name"] in mine],
        "decisions": decisions,
        "tenant": principal.tenant,
        "tenant_counts": tenant_counts(jobs),
        "held_by_others": held_by_others,
    }
