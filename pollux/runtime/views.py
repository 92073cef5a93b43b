"""What the API answers, as plain data read from a `Service`: a job's row (what `pollux ls` prints), the service's
health, and the dashboard's two polls (its overview and a job's page), which `pollux.dashboard`'s page draws.

A dashboard poll does no more than one query per table and the job rows, so it stays cheap at hundreds of jobs
(`benchmarks/dashboard.py`).
"""

from __future__ import annotations

import os
from collections import Counter
from typing import TYPE_CHECKING, Any

from pollux.cluster import placement
from pollux.runtime import joblog
from pollux.runtime.reports import report_metrics
from pollux.runtime.store import JobState
from pollux.tenants import DEFAULT_TENANT, held_by_tenant

if TYPE_CHECKING:
    from pollux.runtime.service import Service  # typing only: the offline `pollux ls` needs no scheduler

ROUNDS_SHOWN = 500  # rounds behind the utilization chart
DECISION_ROUNDS_SHOWN = 60  # rounds that decided something, in the scheduler view
LOG_TAIL_LINES = 40


def job_row(service: Service, state: JobState, now: float) -> dict[str, Any]:
    """One job as `pollux ls` shows it."""
    report = service.report(state.name)
    goodput, efficiency = report_metrics(report)
    return {
        "name": state.name,
        "status": state.status,
        "tenant": state.spec.get("tenant", DEFAULT_TENANT),
        "experiment": state.spec.get("experiment"),  # the `pollux tune` experiment it is a trial of, if any
        "trial": state.spec.get("trial"),
        "gpus": sum(state.allocation),
        "gpu_type": state.gpu_type if sum(state.allocation) else None,
        "placement": list(placement(tuple(state.allocation))),
        "allocation": list(state.allocation),
        "batch_size": report.batch.total_batch_size if report else None,
        "local_bsz": report.batch.local_bsz if report else None,
        "accum_steps": report.batch.accum_steps if report else None,
        "epoch": report.progress.epoch if report else None,
        "goodput": goodput,
        "efficiency": efficiency,
        "restarts": state.restarts,
        "attempts": state.attempts,
        "submitted_at": state.submitted_at,
        "updated_at": state.updated_at,  # a finished job's end: the dashboard lists those newest first
        "age_s": max(now - state.submitted_at, 0.0),
        "reason": service.reason(state.name) if state.status == "pending" else "",
        "last_error": state.last_error,
    }


def job_rows(service: Service, now: float) -> list[dict[str, Any]]:
    """Every job's row, oldest first."""
    return [job_row(service, state, now) for state in service.store.jobs()]


def job_status(service: Service, name: str, now: float) -> dict[str, Any]:
    """A job's row, its status history and its last report (`pollux ls NAME`)."""
    state = service.store.job(name)
    return {
        **job_row(service, state, now),
        "history": _history(service, name),
        "report": service.store.report(name),
    }


def job_metrics(service: Service, name: str, after: int, now: float) -> dict[str, Any]:
    """A job's row, the GPU-seconds it has held by `now`, and its script's metrics past position `after`."""
    state = service.store.job(name)
    return {
        "job": job_row(service, state, now),
        "gpu_seconds": service.store.attained_service(name, now),
        "metrics": [
            {"seq": seq, "at": r.at, "step": r.step, "metrics": r.metrics}
            for seq, r in service.store.metrics(name, after)
        ],
    }


def health(service: Service) -> dict[str, Any]:
    """Which service answers, and the cluster it schedules."""
    cluster = service.capacity()
    return {
        "ok": True,
        "pid": os.getpid(),
        "policy": service.config.policy,
        "backend": service.launcher.name,
        "nodes": cluster.num_nodes,
        "gpus_per_node": cluster.gpus_per_node if cluster.uniform else None,  # None: see node_gpus
        "node_gpus": list(cluster.node_gpus),
        "node_types": list(cluster.node_types),
        "rounds": service.rounds,
    }


def cluster_of(service: Service) -> dict[str, Any]:
    """Nodes as the dashboard's cluster view draws them: GPUs and GPU type per node (types shown where there are
    several)."""
    cluster = service.launcher.cluster
    return {
        "nodes": [{"gpus": g, "type": t} for g, t in zip(cluster.node_gpus, cluster.node_types, strict=True)],
        "typed": cluster.heterogeneous,
        "num_gpus": cluster.num_gpus,
    }


def tenant_usage(service: Service, states: list[JobState] | None = None) -> dict[str, Any]:
    """Every tenant's GPUs per type: held now (its running jobs), guaranteed, its cap, and the last round's demand,
    entitlement and budget (`pollux.quota.RoundQuota`; zeros before a round with jobs); its running and pending
    jobs; and the GPUs of each type the guarantees were checked against. Without a tenants file, no tenants.
    `states`: the jobs, where the caller has read them already."""
    tenants, cluster = service.tenants, service.capacity()
    types = list(cluster.gpu_types)
    capacity = {t: cluster.gpus_of_type(t) for t in types}
    if tenants is None:
        return {"tenants": [], "gpu_types": types, "capacity": capacity, "round_at": None}
    states = service.store.jobs(include_finished=False) if states is None else states
    active = [(s, str(s.spec.get("tenant", DEFAULT_TENANT))) for s in states if s.status in ("pending", "running")]
    held = held_by_tenant((tenant, s.gpu_type, sum(s.allocation)) for s, tenant in active if s.status == "running")
    counts = Counter((tenant, str(s.status)) for s, tenant in active)
    quota = service.last_quota
    budgets, entitled, demand = (quota.budgets, quota.entitled, quota.demand) if quota is not None else ({}, {}, {})
    rows = [
        {
            "name": tenant.name,
            "weight": tenant.weight,
            "borrow": tenant.borrow,
            "jobs_running": counts[tenant.name, "running"],
            "jobs_pending": counts[tenant.name, "pending"],
            "types": {
                t: {
                    "held": held.get(tenant.name, {}).get(t, 0),
                    "guaranteed": tenant.guarantee_on(t),
                    "max": tenant.max_gpus.get(t),
                    "budget": budgets.get(tenant.name, {}).get(t, 0),
                    "entitled": round(entitled.get(tenant.name, {}).get(t, 0.0), 3),
                    "demand": demand.get(tenant.name, {}).get(t, 0.0),
                }
                for t in types
            },
        }
        for tenant in tenants.tenants
    ]
    return {"tenants": rows, "gpu_types": types, "capacity": capacity, "round_at": quota.now if quota else None}


def overview(service: Service, now: float) -> dict[str, Any]:
    """The dashboard's main poll: the cluster, every job's row, recent rounds (utilization and decisions), and the
    tenants' use of their quotas."""
    rounds = service.store.rounds(ROUNDS_SHOWN)
    deciding = [r for r in rounds if r.decisions][-DECISION_ROUNDS_SHOWN:]
    states = service.store.jobs()
    return {
        "now": now,
        "policy": service.config.policy,
        "backend": service.launcher.name,
        "rounds_run": service.rounds,
        "cluster": cluster_of(service),
        "jobs": [job_row(service, state, now) for state in states],
        "tenants": tenant_usage(service, states),
        "utilization": [[r.at, r.gpus_in_use, r.jobs_running, r.jobs_pending] for r in rounds],
        "decisions": [{"at": r.at, "decisions": list(r.decisions)} for r in reversed(deciding)],
    }


def job_page(service: Service, name: str, now: float) -> dict[str, Any]:
    """A job's dashboard page: its row, goodput/efficiency/batch/GPUs over time, status history and its log's tail."""
    row = job_row(service, service.store.job(name), now)
    samples = service.store.samples(name)
    events = service.store.events(name)
    return {
        "job": row,
        "samples": [[s.at, s.gpus, s.local_bsz, s.accum_steps, s.batch_size, s.goodput, s.efficiency] for s in samples],
        "allocations": [[e["at"], sum(e["allocation"])] for e in events if e["kind"] == "allocation"],
        "history": _history(service, name),
        "log_tail": joblog.tail(service.config.log_dir(name), LOG_TAIL_LINES),
    }


def _history(service: Service, name: str) -> list[dict[str, Any]]:
    return [{"at": at, "status": s, "reason": r} for at, s, r in service.store.history(name)]
