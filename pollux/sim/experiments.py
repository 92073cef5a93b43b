"""Experiments: a hyper-parameter search as the simulator runs it (Pollux §5.4.2; docs/design.md, "Experiments").

A workload row with `trials` N and `concurrency` K is an experiment: N trials of its application, each a job with the
row's request (GPUs and batch, what the fixed-size baselines keep), named `<row>/trial-<i>`. The first K are submitted
at the row's time; each later one when a trial of the same experiment finishes, at that second, as a search library
(Ray Tune) starts the next trial when one of its K ends: at most K of an experiment are ever in the system, and a
trial never arrives before a slot frees. Its JCT counts from that arrival, like any job's; the experiment's makespan
from its first trial's submission to its last trial's finish.

The trials of one experiment are identical: a trial's hyper-parameters (learning rate, momentum) change its gradient
statistics and its epochs to a target accuracy, which no profile measured, so drawing them would invent a
distribution the comparison then depends on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from pollux.sim.metrics import JobRecord
from pollux.sim.workload import WorkloadJob

if TYPE_CHECKING:
    from pollux.sim.backend import SimJob

WAITING_S = math.inf  # the submission time of a trial no slot has freed for yet
HOUR_S = 3600.0


def trial_name(experiment: str, index: int, trials: int) -> str:
    """`hpo/trial-07`: the experiment's name, and the trial's number from 1, zero-padded to the width of N (two at
    least) so the names sort in trial order."""
    return f"{experiment}/trial-{index:0{max(2, len(str(trials)))}d}"


def jobs_of(row: WorkloadJob) -> list[tuple[str, float]]:
    """(name, submission time) of each job a row stands for: the row itself, or its trials in order, the first K at
    the row's time and the others waiting (`WAITING_S`) for a slot."""
    if row.trials is None or row.concurrency is None:
        return [(row.name, row.submit_time_s)]
    return [
        (trial_name(row.name, i + 1, row.trials), row.submit_time_s if i < row.concurrency else WAITING_S)
        for i in range(row.trials)
    ]


def job_count(rows: Sequence[WorkloadJob]) -> int:
    """The jobs a workload's rows stand for, every trial counted."""
    return sum(row.trials or 1 for row in rows)


class TrialArrivals:
    """Submits an experiment's waiting trials as its trials finish: the backend calls it after every advance.

    Each finish of a trial frees its slot at its completion second, and the experiment's next waiting trial is
    submitted then, starting from the throughput its experiment's trials have measured so far (`SimJob.start_from`).
    Finishes are taken in time order, and a later advance never finishes a trial before an earlier one did, so the
    i-th trial submitted after the first K is submitted at the i-th finish."""

    def __init__(self, jobs: Sequence[SimJob]) -> None:
        self._trials: dict[str, list[SimJob]] = {}
        for job in jobs:
            if job.spec.experiment is not None:
                self._trials.setdefault(job.spec.experiment, []).append(job)
        self._finishes_seen = dict.fromkeys(self._trials, 0)

    def __call__(self) -> None:
        for experiment, trials in self._trials.items():
            finished = sorted(job.completion_time_s for job in trials if job.completion_time_s is not None)
            waiting = [job for job in trials if job.spec.submit_time_s == WAITING_S]
            for time_s, job in zip(finished[self._finishes_seen[experiment] :], waiting, strict=False):
                job.spec = replace(job.spec, submit_time_s=time_s)
                job.start_from(trials)
            self._finishes_seen[experiment] = len(finished)


def experiment_summary(records: Sequence[JobRecord]) -> dict[str, dict[str, float]]:
    """Per experiment (in workload order): `trials`, `trials_finished`, `avg_trial_jct_s`, `makespan_s` (first
    submission to last finish; NaN while a trial is unfinished), `gpu_hours_per_trial` and `avg_restarts`."""
    trials: dict[str, list[JobRecord]] = {}
    for record in records:
        if record.experiment:
            trials.setdefault(record.experiment, []).append(record)
    summary = {}
    for experiment, jobs in trials.items():
        jct = [j.jct_s for j in jobs if j.jct_s is not None]
        finishes = [j.finish_s for j in jobs if j.finish_s is not None]
        complete = len(finishes) == len(jobs)
        summary[experiment] = {
            "trials": float(len(jobs)),
            "trials_finished": float(len(finishes)),
            "avg_trial_jct_s": float(np.mean(jct)) if jct else math.nan,
            "makespan_s": max(finishes) - min(j.submit_s for j in jobs) if complete else math.nan,
            "gpu_hours_per_trial": float(np.mean([j.gpu_seconds for j in jobs])) / HOUR_S,
            "avg_restarts": float(np.mean([j.restarts for j in jobs])),
        }
    return summary
