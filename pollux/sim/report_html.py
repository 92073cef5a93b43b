"""`report.html` of `pollux simulate --out DIR`: the run's comparison table and charts in one self-contained file.

The data (summary per policy, JCTs, fairness ρ as Themis and as Sia's Equation 3 measure it, the cluster over time,
each job's GPUs and batch over time; in a run with tenants, a row per policy and tenant: received against entitled
GPU-hours, JCT, guarantee held; in a run with experiments, a row per policy and experiment: average trial JCT and
makespan) is inlined as JSON and drawn by the dashboard's own charting script, so the report
looks like the dashboard and opens from disk without a network. The job shown first is the one whose GPUs or batch
changed most often, summed over the policies: the job where elastic scheduling shows (any other is a click away).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pollux.dashboard.pages import report_page
from pollux.sim.palette import policy_colors
from pollux.sim.run import SimResult
from pollux.sim.table import EXPERIMENT_TABLE, TENANT_TABLE, columns_of, experiment_rows, in_table_order, tenant_rows

REPORT_FILE = "report.html"


def _finite(value: float | None) -> float | None:
    """JSON has no NaN: an undefined ρ (no isolated JCT) is null, which the charts leave out."""
    return None if value is None or not math.isfinite(value) else value


def chosen_job(results: Sequence[SimResult]) -> str:
    """The job with the most changes of GPUs or batch over all policies (ties: the first submitted)."""
    names = [job.name for job in results[0].jobs] if results else []
    changes = {name: sum(len(r.job_timelines.get(name, ())) for r in results) for name in names}
    return max(names, key=lambda name: changes[name]) if names else ""


def report_data(results: Sequence[SimResult], title: str, num_gpus: int) -> dict[str, Any]:
    """What the report's script draws: the comparison table as the CLI prints it (`pollux.sim.table`, its rows and
    so every legend in the table's order) and each policy's colour (`pollux.sim.palette`), as the PNGs have it."""
    ordered = in_table_order(results)
    columns = columns_of(ordered)
    colors = policy_colors(r.policy for r in ordered)
    policies = []
    for result in ordered:
        policies.append(
            {
                "policy": result.policy,
                "color": colors[result.policy],
                "cells": [column.cell(result) for column in columns],
                "jct_s": [j.jct_s for j in result.jobs if j.jct_s is not None],
                "fairness": [_finite(j.fairness) for j in result.jobs if j.fairness is not None],
                "sia_fairness": [_finite(j.sia_fairness) for j in result.jobs if j.sia_fairness is not None],
                "timeline": [[p.time_s, p.gpus_in_use, p.jobs_queued] for p in result.timeline],
                "job_timelines": {name: [list(p) for p in points] for name, points in result.job_timelines.items()},
                "finish_s": {j.name: j.finish_s for j in result.jobs},
            }
        )
    data = {
        "title": title,
        "num_gpus": num_gpus,
        "columns": [{"label": c.label, "meaning": c.meaning} for c in columns],
        "policies": policies,
        "job_names": [job.name for job in results[0].jobs] if results else [],
        "chosen_job": chosen_job(results),
    }
    if any(r.tenants for r in results):
        data["tenants"] = {
            "columns": [{"label": c.label, "meaning": c.meaning} for c in TENANT_TABLE],
            "rows": [
                {"policy": policy, "color": colors[policy], "tenant": tenant, "cells": cells}
                for policy, tenant, cells in tenant_rows(ordered)
            ],
        }
    if any(r.experiments for r in results):
        data["experiments"] = {
            "columns": [{"label": c.label, "meaning": c.meaning} for c in EXPERIMENT_TABLE],
            "rows": [
                {"policy": policy, "color": colors[policy], "experiment": experiment, "cells": cells}
                for policy, experiment, cells in experiment_rows(ordered)
            ],
        }
    return data


def write_report(results: Sequence[SimResult], out_dir: Path, title: str, num_gpus: int) -> Path:
    path = out_dir / REPORT_FILE
    path.write_text(report_page(title, report_data(results, title, num_gpus)), encoding="utf-8")
    return path
