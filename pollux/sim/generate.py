"""Generate workloads the way the artifact made its own (docs/design.md, Workloads), reproducibly by seed.

The artifact sampled jobs of Microsoft's Philly trace (duration >= 60 s, GPU-time < 1,000 GPU-hours) submitted in
an 8-hour window from hour 2 of the day, kept each job's submission second (relative to the window's start), and
turned its GPU-time into an application: < 1 GPU-hour → cifar10 or ncf, < 10 → deepspeech2 or bert, < 100 → yolov3,
else imagenet. The user's GPUs and batch size (what the fixed-size baselines run) are a random choice among the
application's "tuned" configurations, those reaching 50–80% of linear scaling.

Two sources of (submission second, GPU-time bucket), one generator:
- the trace itself (`philly-jobs.csv` in the data folder), sampled without replacement as the artifact did;
- without it, `philly_summary.json`, committed figures derived once from the trace by `scripts/make_philly_summary.py`:
  the kept jobs counted by hour of day × GPU-time bucket (24 × 4 numbers). Submission seconds are drawn from the
  hourly histogram (uniform within an hour), the bucket from that hour's own mix, because the mix does vary over the
  day (55–86% short jobs), so a fresh clone without data still gets the window's arrival shape and job mix.
The tuned configurations are a parameter (`configs`): the default is the summary's list of the (GPUs, batch) pairs
the artifact's generator itself chose in its published tuned workloads, so this module needs no job model; a caller
with step-time models can pass its own 50–80% rule.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any, Literal

import numpy as np

from pollux.data.philly import (
    MAX_GPU_TIME_S,
    MIN_DURATION_S,
    PHILLY_FILE,
    SUMMARY_PATH,
    PhillyTrace,
    find_philly_trace,
    read_philly_trace,
)
from pollux.defaults import GENERATE_START_HOUR
from pollux.errors import DataNotFoundError, SpecError
from pollux.sim.workload import Workload, WorkloadJob

DAY_S = 24 * 3600
HOUR_S = 3600
GPU_TIME_QUANTILES = 201  # 0, 0.5, ..., 100 percent
# GPU-time bucket upper edges (1, 10, 100 GPU-hours) and the applications each bucket becomes, chosen uniformly:
# "cifar10 or ncf at random" and "deepspeech2, half of them bert" are both a fair pick between two.
BUCKET_EDGES_S: tuple[float, ...] = (1.0 * HOUR_S, 10.0 * HOUR_S, 100.0 * HOUR_S)
BUCKET_APPLICATIONS: tuple[tuple[str, ...], ...] = (
    ("cifar10", "ncf"),
    ("deepspeech2", "bert"),
    ("yolov3",),
    ("imagenet",),
)

Source = Literal["auto", "trace", "summary"]
ConfigChoices = Callable[[str], Sequence[tuple[int, int]]]


@dataclass(frozen=True)
class PhillySummary:
    """The committed figures: kept jobs by hour of day × GPU-time bucket, and each application's tuned choices."""

    jobs_by_hour_and_bucket: np.ndarray  # shape (24, 4), counts
    tuned_configurations: Mapping[str, tuple[tuple[int, int], ...]]
    gpu_time_quantiles_s: tuple[float, ...]  # GPU-time of kept jobs at 0, 0.5, ..., 100 percent


def gpu_time_bucket(gpu_time_s: np.ndarray) -> np.ndarray:
    """0: < 1 GPU-hour, 1: < 10, 2: < 100, 3: the rest (the artifact's thresholds, strict upper edges)."""
    return np.searchsorted(np.asarray(BUCKET_EDGES_S), np.asarray(gpu_time_s, dtype=np.float64), side="right")


def summarize_philly(trace: PhillyTrace) -> list[list[int]]:
    """Kept jobs counted by submission hour of day (rows) × GPU-time bucket (columns): the summary's core."""
    kept = trace.kept()
    hours = trace.second_of_day[kept] // HOUR_S
    buckets = gpu_time_bucket(trace.gpu_time_s[kept])
    counts = np.zeros((24, len(BUCKET_EDGES_S) + 1), dtype=np.int64)
    np.add.at(counts, (hours, buckets), 1)
    return counts.tolist()


def gpu_time_quantiles(trace: PhillyTrace) -> list[float]:
    """GPU-seconds of kept jobs at evenly spaced quantiles: the service distribution without the trace."""
    values = np.quantile(trace.gpu_time_s[trace.kept()], np.linspace(0.0, 1.0, GPU_TIME_QUANTILES))
    return [round(float(v), 1) for v in values]


def tuned_configurations_from_workloads(workloads: Iterable[Workload]) -> dict[str, list[list[int]]]:
    """The distinct (GPUs, batch) requests per application: in the artifact's tuned workloads these are exactly the
    choices its 50–80%-of-linear-scaling rule offered (it drew uniformly among them, and every one appears)."""
    choices: dict[str, set[tuple[int, int]]] = {}
    for workload in workloads:
        for job in workload.jobs:
            choices.setdefault(job.application, set()).add((job.num_replicas, job.batch_size))
    return {application: [list(pair) for pair in sorted(pairs)] for application, pairs in sorted(choices.items())}


def build_summary(data_dir: Path) -> dict[str, Any]:
    """Everything `philly_summary.json` holds, from the data folder; the script writes it, a test re-derives it."""
    from pollux.sim.workload import artifact_workload_names, read_workload

    trace_path = Path(data_dir) / PHILLY_FILE
    trace = read_philly_trace(trace_path)
    tuned_names = [name for name in artifact_workload_names(data_dir) if "realistic" not in name]
    if not tuned_names:
        raise DataNotFoundError(f"{Path(data_dir) / 'workloads'} holds no tuned artifact workloads")
    workloads = [read_workload(name, data_dir) for name in tuned_names]
    return {
        "about": (
            "Figures derived by scripts/make_philly_summary.py from the Pollux artifact's data, so that "
            "the workload generator and the Gittins index work without it; not the trace itself. "
            "jobs_by_hour_and_bucket: kept Philly jobs, rows = submission hour of day 0..23, "
            "columns = GPU-time below each upper edge, then the rest. "
            "tuned_configurations: per application, the (num_replicas, batch_size) requests of the tuned workloads."
        ),
        "philly": {
            "file": PHILLY_FILE,
            "sha256": hashlib.sha256(trace_path.read_bytes()).hexdigest(),
            "jobs": int(trace.second_of_day.size),
            "kept_jobs": int(np.count_nonzero(trace.kept())),
            "filter": f"duration_s >= {MIN_DURATION_S:.0f} and gpu_time_s < {MAX_GPU_TIME_S:.0f}",
        },
        "gpu_time_bucket_upper_edges_s": list(BUCKET_EDGES_S),
        "jobs_by_hour_and_bucket": summarize_philly(trace),
        "gpu_time_quantiles_s": gpu_time_quantiles(trace),
        "tuned_configurations_from": f"the artifact's {len(tuned_names)} tuned workloads (all but workloads-realistic)",
        "tuned_configurations": tuned_configurations_from_workloads(workloads),
    }


@cache
def load_summary(path: Path = SUMMARY_PATH) -> PhillySummary:
    """The committed figures, checked for shape (a hand-edited file should fail here, not as odd workloads)."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        counts = np.asarray(raw["jobs_by_hour_and_bucket"], dtype=np.int64)
        edges = tuple(float(edge) for edge in raw["gpu_time_bucket_upper_edges_s"])
        tuned = {
            application: tuple((int(gpus), int(batch)) for gpus, batch in pairs)
            for application, pairs in raw["tuned_configurations"].items()
        }
        quantiles = tuple(float(q) for q in raw["gpu_time_quantiles_s"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise DataNotFoundError(
            f"{path}: unreadable workload summary ({error}); rerun scripts/make_philly_summary.py"
        ) from error
    if counts.shape != (24, len(BUCKET_EDGES_S) + 1) or (counts < 0).any() or counts.sum() == 0:
        raise DataNotFoundError(f"{path}: jobs_by_hour_and_bucket must be 24 × 4 non-negative counts")
    counts.flags.writeable = False
    if edges != BUCKET_EDGES_S:
        raise DataNotFoundError(f"{path}: GPU-time bucket edges {edges} differ from the generator's {BUCKET_EDGES_S}")
    if len(quantiles) != GPU_TIME_QUANTILES or any(b < a for a, b in itertools.pairwise(quantiles)):
        raise DataNotFoundError(f"{path}: gpu_time_quantiles_s must be {GPU_TIME_QUANTILES} increasing values")
    return PhillySummary(jobs_by_hour_and_bucket=counts, tuned_configurations=tuned, gpu_time_quantiles_s=quantiles)


def tuned_configurations(application: str) -> tuple[tuple[int, int], ...]:
    """Default `configs`: the (GPUs, batch) choices the artifact's generator made for `application`."""
    choices = load_summary().tuned_configurations
    if application not in choices:
        raise SpecError(f"no tuned configurations for application {application!r}; known: {', '.join(choices)}")
    return choices[application]


@dataclass(frozen=True, eq=False)  # holds arrays: compare its jobs, not it
class SampledJobs:
    """Sampled jobs in draw order (named by submission order), and the trace rows they came from: what
    `generate_workload` writes, and what a scenario re-times or labels (`pollux.sim.tenant_workloads`)."""

    name: str
    jobs: tuple[WorkloadJob, ...]
    source: Path  # the trace or SUMMARY_PATH
    trace: PhillyTrace | None  # None: drawn from the summary
    trace_rows: np.ndarray | None  # the trace row of each job, in draw order


def generate_workload(
    num_jobs: int,
    hours: float,
    seed: int,
    load: float = 1.0,
    data_dir: Path | None = None,
    *,
    start_hour: int = GENERATE_START_HOUR,
    configs: ConfigChoices | None = None,
    source: Source = "auto",
) -> Workload:
    """`round(num_jobs × load)` jobs submitted in [0, hours × 3600) s, as the artifact generated its workloads.

    `source`: "trace" needs the Philly trace, "summary" uses the committed figures, "auto" the trace when the data
    folder has one. The result's `source` is the file sampled (the trace or `SUMMARY_PATH`). Same arguments and
    seed → the same workload; the random stream is `numpy.random.default_rng(seed)`.
    """
    sample = sample_jobs(num_jobs, hours, seed, load, data_dir, start_hour=start_hour, configs=configs, source=source)
    return Workload(name=sample.name, jobs=sample.jobs, source=sample.source)


def sample_jobs(
    num_jobs: int,
    hours: float,
    seed: int,
    load: float = 1.0,
    data_dir: Path | None = None,
    *,
    start_hour: int = GENERATE_START_HOUR,
    configs: ConfigChoices | None = None,
    source: Source = "auto",
) -> SampledJobs:
    """`generate_workload`'s jobs (same arguments, same random stream), in draw order with their trace rows."""
    count = _job_count(num_jobs, load)
    window_s = _window_s(hours, start_hour)
    rng = np.random.default_rng(seed)
    trace_path = _trace_path(data_dir, source)
    trace, rows = None, None
    if trace_path is None:
        submit_s, buckets = _sample_summary(load_summary(), count, window_s, start_hour, rng)
        origin = SUMMARY_PATH
    else:
        trace = read_philly_trace(trace_path)
        rows = _sample_trace(trace, count, window_s, start_hour, rng)
        submit_s = _shifted_seconds(trace, start_hour)[rows]
        buckets = gpu_time_bucket(trace.gpu_time_s[rows])
        origin = trace_path
    jobs = named_in_submission_order(_make_jobs(submit_s, buckets, rng, configs or tuned_configurations))
    return SampledJobs(f"generated-{count}jobs-{hours:g}h-seed{seed}", jobs, origin, trace, rows)


def named_in_submission_order(jobs: Sequence[WorkloadJob]) -> tuple[WorkloadJob, ...]:
    """The same jobs, in the same order, named `<application>-<index>` by submission time (ties: the given order)."""
    rank = {
        position: index for index, position in enumerate(sorted(range(len(jobs)), key=lambda i: jobs[i].submit_time_s))
    }
    return tuple(replace(job, name=f"{job.application}-{rank[position]}") for position, job in enumerate(jobs))


def _job_count(num_jobs: int, load: float) -> int:
    """Load variants scale the number of jobs in the same window (the artifact's 0.5×, 1.5×, 2×)."""
    if num_jobs < 1:
        raise SpecError(f"--jobs must be at least 1, got {num_jobs}")
    if not (np.isfinite(load) and load > 0):
        raise SpecError(f"--load must be a positive number, got {load}")
    count = round(num_jobs * load)
    if count < 1:
        raise SpecError(f"--jobs {num_jobs} × --load {load} rounds to no job at all")
    return count


def _window_s(hours: float, start_hour: int) -> int:
    """The window lies within one day: jobs keep their second of the day, so a longer one cannot be filled."""
    if not (0 < hours <= 24):
        raise SpecError(f"--hours must be in (0, 24]: jobs keep their submission second of the day, got {hours}")
    if not (0 <= start_hour < 24):
        raise SpecError(f"start hour must be in 0..23, got {start_hour}")
    return max(1, round(hours * HOUR_S))


def _trace_path(data_dir: Path | None, source: Source) -> Path | None:
    """The trace to sample, or None for the committed summary."""
    if source == "summary":
        return None
    if source not in ("auto", "trace"):
        raise SpecError(f"source must be auto, trace or summary, got {source!r}")
    try:
        return find_philly_trace(data_dir)
    except DataNotFoundError:
        if source == "trace":
            raise
        return None


def _shifted_seconds(trace: PhillyTrace, start_hour: int) -> np.ndarray:
    """Each trace job's submission second counted from the window's start hour (on its own day)."""
    return (trace.second_of_day - start_hour * HOUR_S) % DAY_S


def _sample_trace(
    trace: PhillyTrace, count: int, window_s: int, start_hour: int, rng: np.random.Generator
) -> np.ndarray:
    """Rows of kept jobs submitted in the window (any day), drawn without replacement: each trace job at most once."""
    pool = np.flatnonzero(trace.kept() & (_shifted_seconds(trace, start_hour) < window_s))
    if count > pool.size:
        raise SpecError(
            f"{trace.path}: only {pool.size} kept jobs are submitted in a {window_s / HOUR_S:g}-hour window from hour "
            f"{start_hour}, fewer than the {count} asked for"
        )
    return rng.choice(pool, size=count, replace=False)


def _sample_summary(
    summary: PhillySummary, count: int, window_s: int, start_hour: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Submission seconds from the hourly histogram (uniform within an hour), then a bucket from that hour's mix."""
    counts = summary.jobs_by_hour_and_bucket
    hour_of = ((np.arange(window_s) + start_hour * HOUR_S) % DAY_S) // HOUR_S
    weight = counts.sum(axis=1)[hour_of].astype(np.float64)
    if weight.sum() == 0:
        raise SpecError(f"{SUMMARY_PATH}: no job in the summary is submitted in this window")
    submit_s = rng.choice(window_s, size=count, p=weight / weight.sum())
    mix = counts[hour_of[submit_s]].astype(np.float64)
    cumulative = np.cumsum(mix, axis=1) / mix.sum(axis=1, keepdims=True)
    buckets = (rng.random(count)[:, None] >= cumulative[:, :-1]).sum(axis=1)
    return submit_s.astype(np.int64), buckets


def _make_jobs(
    submit_s: np.ndarray, buckets: np.ndarray, rng: np.random.Generator, configs: ConfigChoices
) -> tuple[WorkloadJob, ...]:
    """Application from the bucket, request from its tuned choices; in draw order, not yet named."""
    pick_application = rng.random(submit_s.size)
    pick_config = rng.random(submit_s.size)
    choices: dict[str, Sequence[tuple[int, int]]] = {}
    jobs = []
    for time_s, bucket, u_app, u_config in zip(submit_s, buckets, pick_application, pick_config, strict=True):
        options = BUCKET_APPLICATIONS[int(bucket)]
        application = options[int(u_app * len(options))]
        if application not in choices:
            choices[application] = _checked_choices(application, configs(application))
        num_replicas, batch_size = choices[application][int(u_config * len(choices[application]))]
        jobs.append(WorkloadJob("", int(time_s), application, num_replicas, batch_size))
    return tuple(jobs)


def _checked_choices(application: str, pairs: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """A `configs` callable must offer at least one (GPUs >= 1, batch >= 1) pair; say which application it failed."""
    checked = tuple((int(gpus), int(batch)) for gpus, batch in pairs)
    if not checked or any(gpus < 1 or batch < 1 for gpus, batch in checked):
        raise SpecError(f"configurations for {application!r} must be (GPUs >= 1, batch >= 1) pairs, got {list(pairs)}")
    return checked
