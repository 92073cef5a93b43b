"""What a simulation measures: per-job records, a timeline, and the summary people compare policies by.

Finish-time fairness (Themis, NSDI'20) ρ_j = JCT_j / JCT_j(alone on an exclusive 1/J share). J is the
time-averaged number of active jobs over the job's own lifetime (submit → finish), so a job that ran while the
cluster was crowded is compared against a proportionally smaller share. The share is max(1, round(G/J)) GPUs of
the G in the cluster, packed on as few nodes as possible, capped by what the job can use; the job runs alone on
it under the same rules (its fixed batch, or its own goodput-optimal batch) including one restart delay.

On a cluster of several GPU types the Sia paper measures ρ by its Equation 3 (`sia_fairness`): the expectation over
the types, each weighted by its share of the cluster's GPUs, of ρ on that type's GPUs alone (a share of
max(1, round(N_g/J)) of its N_g GPUs, J as above). On one type it is ρ itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np


@dataclass(frozen=True)
class JobRecord:
    """One finished (or unfinished, at the end of a capped run) job. Times in seconds."""

    name: str
    application: str
    submit_s: float
    start_s: float | None
    finish_s: float | None
    jct_s: float | None
    restarts: int
    gpu_seconds: float
    queueing_s: float
    fair_share_gpus: int
    isolated_jct_s: float | None
    fairness: float | None  # ρ = JCT / isolated JCT; > 1: worse off than on its own share
    gpu_seconds_by_type: Mapping[str, float] = field(default_factory=dict)  # restores included
    tenant: str | None = None  # its tenant, in a run with a tenants file
    sia_fairness: float | None = None  # ρ by Sia's Equation 3, the expectation over GPU types; = fairness on one
    experiment: str | None = None  # in a run with experiments, the one it is a trial of ("" for none)

    def as_row(self) -> dict[str, object]:
        """One CSV row: the per-type GPU-seconds as columns `gpu_seconds_<type>`, then `sia_fairness` last; the
        tenant after the name, in a run with tenants, and then the experiment, in a run with experiments (without
        either, the columns are as they were)."""
        row = asdict(self)
        by_type, tenant, sia = row.pop("gpu_seconds_by_type"), row.pop("tenant"), row.pop("sia_fairness")
        experiment = row.pop("experiment")
        head = {"name": row.pop("name")}
        if tenant is not None:
            head["tenant"] = tenant
        if experiment is not None:
            head["experiment"] = experiment
        return head | row | {f"gpu_seconds_{t}": s for t, s in by_type.items()} | {"sia_fairness": sia}


@dataclass(frozen=True)
class TimelinePoint:
    """The cluster at the end of one scheduling round."""

    time_s: float
    gpus_in_use: int
    jobs_running: int
    jobs_queued: int
    gpus_in_use_by_type: Mapping[str, int] = field(default_factory=dict)

    def as_row(self) -> dict[str, object]:
        """One CSV row: the per-type GPUs in use as columns `gpus_in_use_<type>`."""
        row = asdict(self)
        by_type = row.pop("gpus_in_use_by_type")
        return row | {f"gpus_in_use_{t}": g for t, g in by_type.items()}


def _percentile(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if values.size else float("nan")


def summarize(
    jobs: Sequence[JobRecord], timeline: Sequence[TimelinePoint], gpus_by_type: Mapping[str, int]
) -> dict[str, float]:
    """Summary metrics, seconds throughout (`avg_jct_s` among them) but for GPU-hours per job, the Sia paper's
    unit: GPUs held × time, restores included, over all jobs. Contention is the Sia paper's too: jobs running or
    queued per round, over the rounds with any. Utilization per GPU type as `gpu_utilization_<type>`. Finish-time
    fairness twice: `unfair_share` (ρ > 1) and `worst_fairness` of Themis' ρ, and `sia_unfair_share` and
    `sia_worst_fairness` of Sia's Equation 3, the same on one GPU type."""
    jct = np.array([j.jct_s for j in jobs if j.jct_s is not None], dtype=np.float64)
    fairness = np.array([j.fairness for j in jobs if j.fairness is not None], dtype=np.float64)
    sia_fairness = np.array([j.sia_fairness for j in jobs if j.sia_fairness is not None], dtype=np.float64)
    finished = [j for j in jobs if j.finish_s is not None]
    busy = [p for p in timeline if p.jobs_running + p.jobs_queued > 0]
    contention = np.array([p.jobs_running + p.jobs_queued for p in busy], dtype=np.float64)
    num_gpus = sum(gpus_by_type.values())
    per_type = {
        f"gpu_utilization_{t}": float(np.mean([p.gpus_in_use_by_type.get(t, 0) for p in busy]) / gpus) if busy else 0.0
        for t, gpus in gpus_by_type.items()
    }
    return per_type | {
        "gpu_hours_per_job": float(np.mean([j.gpu_seconds for j in jobs]) / 3600) if jobs else float("nan"),
        "contention_mean": float(contention.mean()) if contention.size else 0.0,
        "contention_max": float(contention.max()) if contention.size else 0.0,
        "jobs": float(len(jobs)),
        "jobs_finished": float(len(finished)),
        "avg_jct_s": float(jct.mean()) if jct.size else float("nan"),
        "median_jct_s": _percentile(jct, 50),
        "p99_jct_s": _percentile(jct, 99),
        "makespan_s": max((j.finish_s for j in finished if j.finish_s is not None), default=0.0)
        - min((j.submit_s for j in jobs), default=0.0),
        "avg_queueing_s": float(np.mean([j.queueing_s for j in jobs])) if jobs else float("nan"),
        "avg_restarts": float(np.mean([j.restarts for j in jobs])) if jobs else float("nan"),
        "gpu_utilization": float(np.mean([p.gpus_in_use for p in busy]) / num_gpus) if busy else 0.0,
        "unfair_share": float(np.mean(fairness > 1.0)) if fairness.size else float("nan"),
        "worst_fairness": float(fairness.max()) if fairness.size else float("nan"),
        "sia_unfair_share": float(np.mean(sia_fairness > 1.0)) if sia_fairness.size else float("nan"),
        "sia_worst_fairness": float(sia_fairness.max()) if sia_fairness.size else float("nan"),
    }


def billing_window(jobs: Sequence[JobRecord]) -> tuple[float, float]:
    """The span a cluster is paid for when comparing cluster sizes: first submission to last completion."""
    start = min((j.submit_s for j in jobs), default=0.0)
    end = max((j.finish_s for j in jobs if j.finish_s is not None), default=start)
    return start, end


def node_hours(steps: Sequence[tuple[float, int]], start_s: float, end_s: float) -> float:
    """∫ nodes dt over [start_s, end_s] in node-hours, for the node count that holds `nodes` from each `time_s` of
    `steps` (ascending) until the next; the first step also covers any time before it."""
    total = 0.0
    for i, (time_s, nodes) in enumerate(steps):
        begin = start_s if i == 0 else max(time_s, start_s)
        finish = min(steps[i + 1][0], end_s) if i + 1 < len(steps) else end_s
        total += nodes * max(finish - begin, 0.0)
    return total / 3600
