"""The policies' comparison table, one definition for the table `pollux simulate` prints and the one in report.html:
its columns, what each means (printed under the table in both, so "ρ>1" or "queue h" is explained where it is
shown), its cells, and its order, best average JCT first, which every legend of the plots and the report follows.
In a run with tenants, a second table has one row per policy and tenant (`TENANT_TABLE`, `tenant_rows`); in a run with
experiments, another one row per policy and experiment (`EXPERIMENT_TABLE`, `experiment_rows`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pollux.sim.run import SimResult

HOUR_S = 3600.0
MISSING = "–"  # an undefined metric (no job finished, no fairness measured)


@dataclass(frozen=True)
class Column:
    label: str
    meaning: str
    cell: Callable[[SimResult], str]


def _formatted(value: float, format_spec: str, scale: float = 1.0) -> str:
    return format(value / scale, format_spec) if math.isfinite(value) else MISSING


def _metric(key: str, format_spec: str, scale: float = 1.0) -> Callable[[SimResult], str]:
    def cell(result: SimResult) -> str:
        return _formatted(result.summary.get(key, math.nan), format_spec, scale)

    return cell


COLUMNS = (
    Column("avg JCT h", "mean job completion time (submission to finish), hours", _metric("avg_jct_s", ".2f", HOUR_S)),
    Column("median h", "median job completion time, hours", _metric("median_jct_s", ".2f", HOUR_S)),
    Column("p99 h", "99th percentile of job completion time, hours", _metric("p99_jct_s", ".2f", HOUR_S)),
    Column("makespan h", "simulated time until the last job finished, hours", _metric("makespan_s", ".1f", HOUR_S)),
    Column(
        "queue h",
        "mean time a job spent without GPUs (its JCT minus its running time), hours",
        _metric("avg_queueing_s", ".2f", HOUR_S),
    ),
    Column("GPU util", "mean share of the GPUs held, over the rounds with any job", _metric("gpu_utilization", ".0%")),
    Column(
        "restarts",
        "mean restarts per job after its first start (each costs the restart delay)",
        _metric("avg_restarts", ".1f"),
    ),
    Column(
        "ρ>1",
        "share of jobs that finished later than alone on a fair 1/J share of the cluster (finish-time "
        "fairness ρ = JCT / JCT alone, Themis; J: jobs active meanwhile)",
        _metric("unfair_share", ".0%"),
    ),
    Column("worst ρ", "the largest ρ: how much worse off the worst-treated job was", _metric("worst_fairness", ".1f")),
)
SIA_FAIRNESS_COLUMNS = (
    Column(
        "Sia ρ>1",
        "share of jobs with ρ > 1 by the Sia paper's Equation 3, where ρ is the mean over GPU types, each weighted by "
        "its share of the GPUs, of JCT / JCT alone on a fair 1/J share of that type's GPUs",
        _metric("sia_unfair_share", ".0%"),
    ),
    Column("Sia worst ρ", "the largest ρ by Sia's Equation 3", _metric("sia_worst_fairness", ".1f")),
)
AUTOSCALE_COLUMNS = (
    Column(
        "node-h",
        "node-hours billed, booting included, first submission to last completion",
        _metric("node_hours", ".0f"),
    ),
    Column("nodes", "mean nodes billed", _metric("nodes_mean", ".1f")),
)
TENANT_COLUMNS = (
    Column(
        "tenant fair",
        "the least received/entitled GPU-hours of any tenant entitled to some (Astraea's tenant fairness; 1: fair)",
        _metric("tenant_min_fairness", ".2f"),
    ),
    Column(
        "tenant Jain",
        "Jain's index of the tenants' received/entitled GPU-hours (1: all alike)",
        _metric("tenant_jain", ".2f"),
    ),
)
WALL = Column(
    "wall s",
    "seconds this machine took to simulate the policy, as its progress bar counts them (loading the job "
    "models and waiting for a free process not included)",
    lambda result: f"{result.wall_s:.1f}",
)


def several_gpu_types(results: Sequence[SimResult]) -> bool:
    """Whether the cluster of the run had more than one GPU type."""
    return len({t for r in results for j in r.jobs for t in j.gpu_seconds_by_type}) > 1


def columns_of(results: Sequence[SimResult]) -> tuple[Column, ...]:
    """The table's columns after the policy's name (Sia's fairness where the cluster had several GPU types, on one
    it is ρ again; node columns where a run autoscaled, tenant columns where it had tenants)."""
    autoscaled = any("node_hours" in r.summary for r in results)
    tenants = any(r.tenants for r in results)
    return (
        *COLUMNS,
        *(SIA_FAIRNESS_COLUMNS if several_gpu_types(results) else ()),
        *(AUTOSCALE_COLUMNS if autoscaled else ()),
        *(TENANT_COLUMNS if tenants else ()),
        WALL,
    )


@dataclass(frozen=True)
class GroupColumn:
    """A column of a table with a row per policy and group of its jobs (a tenant, an experiment)."""

    label: str
    meaning: str
    cell: Callable[[Mapping[str, float]], str]


def _group_metric(key: str, format_spec: str, scale: float = 1.0) -> Callable[[Mapping[str, float]], str]:
    return lambda metrics: _formatted(metrics.get(key, math.nan), format_spec, scale)


def _received_share(metrics: Mapping[str, float]) -> str:
    entitled = metrics.get("gpu_hours_entitled", 0.0)
    return _formatted(metrics["gpu_hours_received"] / entitled, ".2f") if entitled > 0 else MISSING


TENANT_TABLE = (
    GroupColumn("jobs", "the tenant's jobs", _group_metric("jobs", ".0f")),
    GroupColumn("avg JCT h", "mean completion time of its jobs, hours", _group_metric("avg_jct_s", ".2f", HOUR_S)),
    GroupColumn(
        "received GPU-h", "GPU-hours its jobs held (restores included)", _group_metric("gpu_hours_received", ".1f")
    ),
    GroupColumn(
        "entitled GPU-h",
        "GPU-hours it was entitled to: its guarantee where its demand reached it, plus its weighted share of what "
        "others left idle, round by round",
        _group_metric("gpu_hours_entitled", ".1f"),
    ),
    GroupColumn("ratio", "received ÷ entitled GPU-hours (1: it got what it was due)", _received_share),
    GroupColumn(
        "guarantee held",
        "share of the rounds, among those its demand reached its guarantee, in which it held the guarantee",
        _group_metric("guarantee_held_share", ".0%"),
    ),
    GroupColumn(
        "reclaim rounds",
        "the most rounds in a row its demand reached its guarantee while it held less",
        _group_metric("max_rounds_to_reclaim", ".0f"),
    ),
)


EXPERIMENT_TABLE = (
    GroupColumn(
        "trials", "the experiment's trials (jobs), at most its concurrency at once", _group_metric("trials", ".0f")
    ),
    GroupColumn(
        "avg trial JCT h",
        "mean completion time of its trials, each from its own submission (when a slot freed), hours",
        _group_metric("avg_trial_jct_s", ".2f", HOUR_S),
    ),
    GroupColumn(
        "makespan h",
        "from its first trial's submission to its last trial's finish, hours",
        _group_metric("makespan_s", ".2f", HOUR_S),
    ),
    GroupColumn(
        "GPU-h per trial", "GPU-hours a trial held (restores included)", _group_metric("gpu_hours_per_trial", ".2f")
    ),
    GroupColumn("restarts", "mean restarts per trial after its first start", _group_metric("avg_restarts", ".1f")),
)


def _group_rows(
    results: Sequence[SimResult],
    groups: Callable[[SimResult], Mapping[str, Mapping[str, float]]],
    table: Sequence[GroupColumn],
) -> list[tuple[str, str, list[str]]]:
    return [
        (result.policy, group, [column.cell(metrics) for column in table])
        for result in in_table_order(results)
        for group, metrics in groups(result).items()
    ]


def tenant_rows(results: Sequence[SimResult]) -> list[tuple[str, str, list[str]]]:
    """(policy, tenant, cells) per policy in the table's order, its tenants in the file's order."""
    return _group_rows(results, lambda result: result.tenants, TENANT_TABLE)


def experiment_rows(results: Sequence[SimResult]) -> list[tuple[str, str, list[str]]]:
    """(policy, experiment, cells) per policy in the table's order, its experiments in the workload's order."""
    return _group_rows(results, lambda result: result.experiments, EXPERIMENT_TABLE)


def in_table_order(results: Sequence[SimResult]) -> list[SimResult]:
    """Best (lowest) average JCT first, a policy with none (no job finished) last; ties keep the given order."""
    return sorted(results, key=lambda r: (not math.isfinite(r.summary["avg_jct_s"]), r.summary["avg_jct_s"]))
