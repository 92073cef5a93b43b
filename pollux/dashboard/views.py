"""What the dashboard's polls answer: JSON built from the store's queries and the API's own job rows.

The page draws everything client-side from these two payloads; the server does no more per poll than one query per
table and the job rows `pollux ls` prints (`pollux.runtime.api.job_row`), so a poll stays cheap at hundreds of jobs
(`benchmarks/dashboard.py`).
"""

from __future__ import annotations

from typing import Any

from pollux.runtime import joblog
from pollux.runtime.service import Service

ROUNDS_SHOWN = 500  # rounds behind the utilization chart
DECISION_ROUNDS_SHOWN = 60  # rounds that decided something, in the scheduler view
LOG_TAIL_LINES = 40


def cluster_of(service: Service) -> dict[str, Any]:
    """Nodes as the cluster view draws them: GPUs and GPU type per node (types shown where there are several)."""
    cluster = service.launcher.cluster
    return {
        "nodes": [{"gpus": g, "type": t} for g, t in zip(cluster.node_gpus, cluster.node_types, strict=True)],
        "typed": cluster.heterogeneous,
        "num_gpus": cluster.num_gpus,
    }


def overview(service: Service, rows: list[dict[str, Any]], now: float) -> dict[str, Any]:
    """The main page's poll: the cluster, every job's row, recent rounds (utilization and decisions)."""
    rounds = service.store.rounds(ROUNDS_SHOWN)
    deciding = [r for r in rounds if r.decisions][-DECISION_ROUNDS_SHOWN:]
    return {
        "now": now,
        "policy": service.config.policy,
        "backend": type(service.launcher).__name__,
        "rounds_run": service.rounds,
        "cluster": cluster_of(service),
        "jobs": rows,
        "utilization": [[r.at, r.gpus_in_use, r.jobs_running, r.jobs_pending] for r in rounds],
        "decisions": [{"at": r.at, "decisions": list(r.decisions)} for r in reversed(deciding)],
    }


def job_detail(service: Service, row: dict[str, Any]) -> dict[str, Any]:
    """A job's page: its row, goodput/efficiency/batch/GPUs over time, status history and the tail of its log."""
    name = row["name"]
    samples = service.store.samples(name)
    events = service.store.events(name)
    return {
        "job": row,
        "samples": [[s.at, s.gpus, s.local_bsz, s.accum_steps, s.batch_size, s.goodput, s.efficiency] for s in samples],
        "allocations": [[e["at"], sum(e["allocation"])] for e in events if e["kind"] == "allocation"],
        "history": [{"at": at, "status": s, "reason": r} for at, s, r in service.store.history(name)],
        "log_tail": joblog.tail(service.config.log_dir(name), LOG_TAIL_LINES),
    }
