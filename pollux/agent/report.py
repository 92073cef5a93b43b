"""The job report: what a running job tells the scheduler about its goodput (Pollux §3, §4.1). Torch-free.

The agent's rank 0 rewrites one small JSON file atomically (write-then-rename) every few steps and at every
checkpoint; the scheduler reads it with `read_report` and rebuilds the job's `GoodputFunction` from it. The schema
is documented field by field in docs/agent-report-schema.md; in short (version 2, seconds and examples throughout):

    {"schema": "pollux.agent.report", "version": 2, "status": "running" | "stopped" | "finished",
     "job_name": str | null, "started_at_s": unix s, "written_at_s": unix s,
     "init_batch_size": M0, "max_batch_size": int, "local_bsz_bounds": [min, max],
     "gradient_accumulation": bool, "adaptive_batch_size": bool,
     "throughput_params": {"alpha_c": s, "beta_c": s/example, "alpha_r": s, "beta_r": s/replica,
                           "alpha_n": s, "beta_n": s/replica, "gamma": ≥ 1} | null,
     "grad_stats": {"sqr": |g|², "var": tr(Σ)/M0} | null,
     "batch": {"num_nodes": N, "num_replicas": K, "local_bsz": m, "accum_steps": s, "total_batch_size": K·m·(s+1)},
     "progress": {"epoch": int, "epoch_examples": int, "epoch_size": int, "steps": int, "examples": int,
                  "m0_steps": float},
     "max_replicas_seen": int, "throughput_configs": int, "restarts": int,
     "checkpoint": {"saved_at_s": unix s | null, "save_s": s | null, "interval_s": s},   (optional: added later)
     "gpu_type": str | null, "throughput_params_by_type": {type: params}, "local_bsz_bounds_by_type": {type: [min,
     max]}, "run_time_by_type_s": {type: s}, "throughput_samples_by_type": {type: [sample, ...]}}   (version 2)

Version 2 keys what the job learns by GPU type: `throughput_params` is the model of the type it runs on now
(`gpu_type`), no longer one model pooled over every type. A version-1 report still reads, as a job of no known type.
Readers accept unknown extra fields (a later minor addition) but refuse a higher `version` (a breaking change).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pollux.agent.atomic import write_atomic
from pollux.errors import ReportError
from pollux.goodput import GoodputFunction, GradientStats, ThroughputParams
from pollux.goodput.throughput import PARAM_NAMES

SCHEMA_NAME = "pollux.agent.report"
SCHEMA_VERSION = 2
STATUSES = ("running", "stopped", "finished")
T = TypeVar("T")


@dataclass(frozen=True)
class BatchInUse:
    """The configuration the job trains with now: N nodes, K replicas, per-replica batch m, accumulation s."""

    num_nodes: int
    num_replicas: int
    local_bsz: int
    accum_steps: int

    @property
    def total_batch_size(self) -> int:
        return self.num_replicas * self.local_bsz * (self.accum_steps + 1)


@dataclass(frozen=True)
class Progress:
    """How far the job is: examples consumed in the current epoch, optimizer steps and examples over the whole job,
    and statistical progress in M0-steps (Σ of the AdaScale gain per step; Pollux §3.1)."""

    epoch: int
    epoch_examples: int
    epoch_size: int
    steps: int
    examples: int
    m0_steps: float


@dataclass(frozen=True)
class CheckpointInfo:
    """The job's periodic checkpoints: when the last one was written, what writing it cost, how often it saves.
    A crash loses at most the interval; `save_s / interval_s` is the share of time spent saving."""

    saved_at_s: float | None
    save_s: float | None
    interval_s: float


@dataclass(frozen=True)
class ThroughputSample:
    """One configuration the job ran on one GPU type, with its median step times (what the throughput fit saw)."""

    num_nodes: int
    num_replicas: int
    local_bsz: int
    accum_steps: int
    compute_s: float
    step_s: float


@dataclass(frozen=True)
class JobReport:
    """One job's goodput parameters, as written by the agent and read by the scheduler."""

    status: str
    job_name: str | None
    started_at_s: float
    written_at_s: float
    init_batch_size: int
    max_batch_size: int
    local_bsz_bounds: tuple[int, int]
    gradient_accumulation: bool
    adaptive_batch_size: bool
    throughput_params: ThroughputParams | None
    grad_stats: GradientStats | None
    batch: BatchInUse
    progress: Progress
    max_replicas_seen: int
    throughput_configs: int
    restarts: int
    checkpoint: CheckpointInfo | None = None  # absent from reports written before periodic checkpoints
    # Version 2: per GPU type (a version-1 report has none of these; its one model is `throughput_params`).
    gpu_type: str | None = None  # the type it runs on now (or last ran on); None: not told (no scheduler)
    throughput_params_by_type: Mapping[str, ThroughputParams] = field(default_factory=dict)
    local_bsz_bounds_by_type: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    run_time_by_type_s: Mapping[str, float] = field(default_factory=dict)
    throughput_samples_by_type: Mapping[str, tuple[ThroughputSample, ...]] = field(default_factory=dict)

    def goodput_function(self) -> GoodputFunction | None:
        """The job's goodput model, or None until the agent has fitted throughput and measured the gradient."""
        if self.throughput_params is None or self.grad_stats is None:
            return None
        return GoodputFunction(self.throughput_params, self.grad_stats, self.init_batch_size)

    def to_json_dict(self) -> dict[str, Any]:
        params = self.throughput_params
        return {
            "schema": SCHEMA_NAME,
            "version": SCHEMA_VERSION,
            "status": self.status,
            "job_name": self.job_name,
            "started_at_s": self.started_at_s,
            "written_at_s": self.written_at_s,
            "init_batch_size": self.init_batch_size,
            "max_batch_size": self.max_batch_size,
            "local_bsz_bounds": list(self.local_bsz_bounds),
            "gradient_accumulation": self.gradient_accumulation,
            "adaptive_batch_size": self.adaptive_batch_size,
            "throughput_params": None if params is None else params_json(params),
            "grad_stats": None if self.grad_stats is None else {"sqr": self.grad_stats.sqr, "var": self.grad_stats.var},
            "batch": {
                "num_nodes": self.batch.num_nodes,
                "num_replicas": self.batch.num_replicas,
                "local_bsz": self.batch.local_bsz,
                "accum_steps": self.batch.accum_steps,
                "total_batch_size": self.batch.total_batch_size,
            },
            "progress": {
                "epoch": self.progress.epoch,
                "epoch_examples": self.progress.epoch_examples,
                "epoch_size": self.progress.epoch_size,
                "steps": self.progress.steps,
                "examples": self.progress.examples,
                "m0_steps": self.progress.m0_steps,
            },
            "max_replicas_seen": self.max_replicas_seen,
            "throughput_configs": self.throughput_configs,
            "restarts": self.restarts,
            "checkpoint": None
            if self.checkpoint is None
            else {
                "saved_at_s": self.checkpoint.saved_at_s,
                "save_s": self.checkpoint.save_s,
                "interval_s": self.checkpoint.interval_s,
            },
            "gpu_type": self.gpu_type,
            "throughput_params_by_type": {t: params_json(p) for t, p in self.throughput_params_by_type.items()},
            "local_bsz_bounds_by_type": {t: list(b) for t, b in self.local_bsz_bounds_by_type.items()},
            "run_time_by_type_s": dict(self.run_time_by_type_s),
            "throughput_samples_by_type": {
                t: [dict(vars(sample)) for sample in samples] for t, samples in self.throughput_samples_by_type.items()
            },
        }

    @classmethod
    def from_json_dict(cls, data: Any, source: str = "<report>") -> JobReport:
        """Validate a decoded report; every failure names `source`, the field and what is accepted."""
        fields = _Fields(data, source)
        if fields.raw("schema") != SCHEMA_NAME:
            raise ReportError(f"{source}: field 'schema' must be {SCHEMA_NAME!r}, got {fields.raw('schema')!r}")
        version = fields.integer("version", minimum=1)
        if version > SCHEMA_VERSION:
            raise ReportError(
                f"{source}: report schema version {version} is newer than this reader's {SCHEMA_VERSION}; "
                "upgrade pollux on the scheduler side"
            )
        status = fields.raw("status")
        if status not in STATUSES:
            raise ReportError(f"{source}: field 'status' must be one of {', '.join(STATUSES)}, got {status!r}")
        job_name = fields.raw("job_name")
        if job_name is not None and not isinstance(job_name, str):
            raise ReportError(f"{source}: field 'job_name' must be a string or null, got {job_name!r}")
        init_batch_size = fields.integer("init_batch_size", minimum=1)
        bounds = fields.as_bounds("local_bsz_bounds")
        batch = fields.nested("batch")
        progress = fields.nested("progress")
        num_nodes = batch.integer("num_nodes", minimum=1)
        return cls(
            status=status,
            job_name=job_name,
            started_at_s=fields.number("started_at_s"),
            written_at_s=fields.number("written_at_s"),
            init_batch_size=init_batch_size,
            max_batch_size=fields.integer("max_batch_size", minimum=init_batch_size),
            local_bsz_bounds=bounds,
            gradient_accumulation=fields.boolean("gradient_accumulation"),
            adaptive_batch_size=fields.boolean("adaptive_batch_size"),
            throughput_params=fields.throughput_params(),
            grad_stats=fields.grad_stats(),
            batch=BatchInUse(
                num_nodes=num_nodes,
                num_replicas=batch.integer("num_replicas", minimum=num_nodes),
                local_bsz=batch.integer("local_bsz", minimum=1),
                accum_steps=batch.integer("accum_steps", minimum=0),
            ),
            progress=Progress(
                epoch=progress.integer("epoch", minimum=0),
                epoch_examples=progress.integer("epoch_examples", minimum=0),
                epoch_size=progress.integer("epoch_size", minimum=0),
                steps=progress.integer("steps", minimum=0),
                examples=progress.integer("examples", minimum=0),
                m0_steps=progress.number("m0_steps", minimum=0.0),
            ),
            max_replicas_seen=fields.integer("max_replicas_seen", minimum=0),
            throughput_configs=fields.integer("throughput_configs", minimum=0),
            restarts=fields.integer("restarts", minimum=0),
            checkpoint=fields.checkpoint(),
            gpu_type=fields.optional_name("gpu_type"),
            throughput_params_by_type=fields.by_type("throughput_params_by_type", _Fields.as_params),
            local_bsz_bounds_by_type=fields.by_type("local_bsz_bounds_by_type", _Fields.as_bounds),
            run_time_by_type_s=fields.by_type("run_time_by_type_s", _Fields.as_seconds),
            throughput_samples_by_type=fields.by_type("throughput_samples_by_type", _Fields.as_samples),
        )


def params_json(params: ThroughputParams) -> dict[str, float]:
    """A throughput model as the report (and the scheduler's bootstrap for the agent) writes it."""
    return dict(zip(PARAM_NAMES, params.to_array().tolist(), strict=True))


def write_report(path: str | os.PathLike[str], report: JobReport) -> Path:
    """Write `report` as JSON, atomically (write-then-rename, no fsync), so the scheduler never reads half a file."""
    return write_atomic(path, (json.dumps(report.to_json_dict(), indent=2) + "\n").encode(), durable=False)


def read_report(path: str | os.PathLike[str]) -> JobReport:
    """Read and validate a report file; raises `ReportError` naming the file and field on any problem."""
    source = os.fspath(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"{source}: cannot read the job report ({exc.strerror or exc})") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportError(f"{source}: not valid JSON (line {exc.lineno}: {exc.msg})") from exc
    return JobReport.from_json_dict(data, source)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Fields:
    """Typed access to one JSON object, with errors that say `file: field 'a.b' must be ...`."""

    def __init__(self, data: Any, source: str, prefix: str = "") -> None:
        if not isinstance(data, dict):
            where = f"field '{prefix.rstrip('.')}'" if prefix else "the report"
            raise ReportError(f"{source}: {where} must be a JSON object, got {type(data).__name__}")
        self._data, self._source, self._prefix = data, source, prefix

    def _fail(self, key: str, expected: str, value: Any) -> ReportError:
        return ReportError(f"{self._source}: field '{self._prefix}{key}' must be {expected}, got {value!r}")

    def raw(self, key: str) -> Any:
        if key not in self._data:
            raise ReportError(f"{self._source}: missing field '{self._prefix}{key}'")
        return self._data[key]

    def nested(self, key: str) -> _Fields:
        return _Fields(self.raw(key), self._source, f"{self._prefix}{key}.")

    def integer(self, key: str, minimum: int) -> int:
        value = self.raw(key)
        if not _is_int(value) or value < minimum:
            raise self._fail(key, f"an integer >= {minimum}", value)
        return int(value)

    def number(self, key: str, minimum: float = -math.inf) -> float:
        value = self.raw(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise self._fail(key, "a finite number", value)
        if value < minimum:
            raise self._fail(key, f"a number >= {minimum}", value)
        return float(value)

    def boolean(self, key: str) -> bool:
        value = self.raw(key)
        if not isinstance(value, bool):
            raise self._fail(key, "true or false", value)
        return value

    def optional_number(self, key: str) -> float | None:
        return None if self._data.get(key) is None else self.number(key, minimum=0.0)

    def checkpoint(self) -> CheckpointInfo | None:
        if self._data.get("checkpoint") is None:
            return None
        info = self.nested("checkpoint")
        return CheckpointInfo(
            saved_at_s=info.optional_number("saved_at_s"),
            save_s=info.optional_number("save_s"),
            interval_s=info.number("interval_s", minimum=0.0),
        )

    def throughput_params(self) -> ThroughputParams | None:
        if self.raw("throughput_params") is None:
            return None
        return self.as_params("throughput_params")

    def as_params(self, key: str) -> ThroughputParams:
        sub = self.nested(key)
        values = [sub.number(name, minimum=0.0) for name in PARAM_NAMES]
        try:
            return ThroughputParams(*values)
        except ValueError as exc:
            raise self._fail(key, "valid ThroughputParams", str(exc)) from exc

    def as_bounds(self, key: str) -> tuple[int, int]:
        bounds = self.raw(key)
        if not (isinstance(bounds, list) and len(bounds) == 2 and all(_is_int(b) for b in bounds)):
            raise self._fail(key, "[min, max] integers", bounds)
        if not 1 <= bounds[0] <= bounds[1]:
            raise self._fail(key, "[min, max] with 1 <= min <= max", bounds)
        return int(bounds[0]), int(bounds[1])

    def as_seconds(self, key: str) -> float:
        return self.number(key, minimum=0.0)

    def as_samples(self, key: str) -> tuple[ThroughputSample, ...]:
        rows = self.raw(key)
        if not isinstance(rows, list):
            raise self._fail(key, "a list of samples", rows)
        samples = []
        for i, row in enumerate(rows):
            sub = _Fields(row, self._source, f"{self._prefix}{key}[{i}].")
            samples.append(
                ThroughputSample(
                    num_nodes=sub.integer("num_nodes", minimum=1),
                    num_replicas=sub.integer("num_replicas", minimum=1),
                    local_bsz=sub.integer("local_bsz", minimum=1),
                    accum_steps=sub.integer("accum_steps", minimum=0),
                    compute_s=sub.number("compute_s", minimum=0.0),
                    step_s=sub.number("step_s", minimum=0.0),
                )
            )
        return tuple(samples)

    def optional_name(self, key: str) -> str | None:
        value = self._data.get(key)
        if value is not None and not (isinstance(value, str) and value):
            raise self._fail(key, "a GPU type name or null", value)
        return value

    def by_type(self, key: str, read: Callable[[_Fields, str], T]) -> dict[str, T]:
        """A version-2 table {GPU type: value}; absent (a version-1 report) reads as empty."""
        if self._data.get(key) is None:
            return {}
        sub = self.nested(key)
        return {gpu_type: read(sub, gpu_type) for gpu_type in sub._data}

    def grad_stats(self) -> GradientStats | None:
        if self.raw("grad_stats") is None:
            return None
        sub = self.nested("grad_stats")
        return GradientStats(sqr=sub.number("sqr", minimum=0.0), var=sub.number("var", minimum=0.0))
