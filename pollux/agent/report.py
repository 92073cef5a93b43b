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

The report is declared once, as the pydantic dataclasses below: reading validates against them (`read_report`,
errors as one-line `ReportError`s naming the field) and writing serializes them. `pollux.goodput` stays free of
pydantic: its `ThroughputParams` and `GradientStats` are read and written through `GoodputRecord`.

Version 2 keys what the job learns by GPU type: `throughput_params` is the model of the type it runs on now
(`gpu_type`), no longer one model pooled over every type. A version-1 report still reads, as a job of no known type.
Readers accept unknown extra fields (a later minor addition) but refuse a higher `version` (a breaking change).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictInt,
    TypeAdapter,
    ValidationError,
    computed_field,
    create_model,
    model_serializer,
    model_validator,
)
from pydantic.dataclasses import dataclass
from pydantic_core import CoreSchema, core_schema

from pollux.agent.atomic import write_atomic
from pollux.errors import ReportError
from pollux.goodput import GoodputFunction, GradientStats, ThroughputParams
from pollux.validation import Bounds, first_problem, invalid, missing, rule

SCHEMA_NAME = "pollux.agent.report"
SCHEMA_VERSION = 2
Status = Literal["running", "stopped", "finished"]
STATUSES: tuple[str, ...] = get_args(Status)
CONFIG = ConfigDict(defer_build=True)  # validators are built on first use, not when a command imports this

Count = Annotated[StrictInt, Field(ge=0)]
PositiveInt = Annotated[StrictInt, Field(ge=1)]
Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0.0, strict=True, allow_inf_nan=False)]


class GoodputRecord:
    """Annotates a field holding a frozen dataclass of `pollux.goodput`: in JSON an object of finite numbers >= 0,
    one per field, handed to the class itself, whose own checks still apply ("must be valid ThroughputParams")."""

    def __init__(self, cls: type[Any]) -> None:
        self.cls, self.names = cls, tuple(field.name for field in dataclasses.fields(cls))
        fields: dict[str, Any] = {name: (NonNegative, ...) for name in self.names}
        self.fields = create_model(cls.__name__, **fields)

    def build(self, fields: BaseModel) -> Any:
        try:
            return self.cls(*(getattr(fields, name) for name in self.names))
        except ValueError as exc:
            raise invalid(f"valid {self.cls.__name__}", str(exc)) from exc

    def to_json(self, value: Any) -> dict[str, float]:
        return {name: float(getattr(value, name)) for name in self.names}

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        from_json = core_schema.no_info_after_validator_function(self.build, handler.generate_schema(self.fields))
        return core_schema.json_or_python_schema(
            json_schema=from_json,
            python_schema=core_schema.no_info_wrap_validator_function(
                lambda value, read: value if isinstance(value, self.cls) else read(value), from_json
            ),
            serialization=core_schema.plain_serializer_function_ser_schema(self.to_json),
        )


PARAMS = GoodputRecord(ThroughputParams)
Params = Annotated[ThroughputParams, PARAMS]
Stats = Annotated[GradientStats, GoodputRecord(GradientStats)]


def _null_as_empty(value: Any) -> Any:
    """A version-2 table {GPU type: value} that is null reads as empty (as an absent one: a version-1 report)."""
    return {} if value is None else value


ByType = BeforeValidator(_null_as_empty)


def _type_or_null(value: Any) -> Any:
    if value is not None and not (isinstance(value, str) and value):
        raise invalid("a GPU type name or null", value)
    return value


@dataclass(frozen=True, config=CONFIG)
class BatchInUse:
    """The configuration the job trains with now: N nodes, K replicas, per-replica batch m, accumulation s."""

    num_nodes: PositiveInt
    num_replicas: StrictInt
    local_bsz: PositiveInt
    accum_steps: Count

    @model_validator(mode="after")
    def _replicas_on_every_node(self) -> BatchInUse:
        if self.num_replicas < self.num_nodes:
            raise invalid(f"an integer >= {self.num_nodes}", self.num_replicas, "num_replicas")
        return self

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_batch_size(self) -> int:
        """K·m·(s+1): written for readers of the file; recomputed, never read back."""
        return self.num_replicas * self.local_bsz * (self.accum_steps + 1)


@dataclass(frozen=True, config=CONFIG)
class Progress:
    """How far the job is: examples consumed in the current epoch, optimizer steps and examples over the whole job,
    and statistical progress in M0-steps (Σ of the AdaScale gain per step; Pollux §3.1). `epochs`: the epochs its
    training loop declares (`remaining_epochs_until`), None where it declares none (added after version 2 was
    fixed, so readers treat a missing one as None); with it the scheduler estimates the work left
    (`pollux.policies.facts.remaining_m0_steps`)."""

    epoch: Count
    epoch_examples: Count
    epoch_size: Count
    steps: Count
    examples: Count
    m0_steps: NonNegative
    epochs: PositiveInt | None = None

    @property
    def epochs_done(self) -> float:
        """Epochs trained, the current one's share included."""
        return self.epoch + (self.epoch_examples / self.epoch_size if self.epoch_size else 0.0)


@dataclass(frozen=True, config=CONFIG)
class CheckpointInfo:
    """The job's periodic checkpoints: when the last one was written, what writing it cost, how often it saves.
    A crash loses at most the interval; `save_s / interval_s` is the share of time spent saving."""

    saved_at_s: NonNegative | None
    save_s: NonNegative | None
    interval_s: NonNegative


@dataclass(frozen=True, config=CONFIG)
class ThroughputSample:
    """One configuration the job ran on one GPU type, with its median step times (what the throughput fit saw)."""

    num_nodes: PositiveInt
    num_replicas: PositiveInt
    local_bsz: PositiveInt
    accum_steps: Count
    compute_s: NonNegative
    step_s: NonNegative


@dataclass(frozen=True, config=CONFIG)
class JobReport:
    """One job's goodput parameters, as written by the agent and read by the scheduler."""

    status: Status
    job_name: str | None
    started_at_s: Number
    written_at_s: Number
    init_batch_size: PositiveInt
    max_batch_size: StrictInt

    @model_validator(mode="after")
    def _batch_sizes(self) -> JobReport:
        if self.max_batch_size < self.init_batch_size:
            raise invalid(f"an integer >= {self.init_batch_size}", self.max_batch_size, "max_batch_size")
        return self

    local_bsz_bounds: Bounds
    gradient_accumulation: StrictBool
    adaptive_batch_size: StrictBool
    throughput_params: Params | None
    grad_stats: Stats | None
    batch: BatchInUse
    progress: Progress
    max_replicas_seen: Count
    throughput_configs: Count
    restarts: Count
    checkpoint: CheckpointInfo | None = None  # absent from reports written before periodic checkpoints
    # Version 2: per GPU type (a version-1 report has none of these; its one model is `throughput_params`).
    gpu_type: Annotated[str | None, BeforeValidator(_type_or_null)] = None  # the type it runs on now; None: not told
    throughput_params_by_type: Annotated[dict[str, Params], ByType] = Field(default_factory=dict)
    local_bsz_bounds_by_type: Annotated[dict[str, Bounds], ByType] = Field(default_factory=dict)
    run_time_by_type_s: Annotated[dict[str, NonNegative], ByType] = Field(default_factory=dict)
    throughput_samples_by_type: Annotated[dict[str, tuple[ThroughputSample, ...]], ByType] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _envelope(cls, data: Any) -> Any:
        """Every report names its schema and version; they are not fields (a report read is the current version)."""
        if not isinstance(data, dict):
            return data  # built in Python (no envelope), or not an object (the fields' check says so)
        for key in ("schema", "version"):
            if key not in data:
                raise missing(key)
        if data["schema"] != SCHEMA_NAME:
            raise invalid(repr(SCHEMA_NAME), data["schema"], "schema")
        version = data["version"]
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise invalid("an integer >= 1", version, "version")
        if version > SCHEMA_VERSION:
            raise rule(
                f"report schema version {version} is newer than this reader's {SCHEMA_VERSION}; "
                "upgrade pollux on the scheduler side"
            )
        return data

    @model_serializer(mode="wrap")
    def _with_envelope(self, fields: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {"schema": SCHEMA_NAME, "version": SCHEMA_VERSION, **fields(self)}

    def goodput_function(self) -> GoodputFunction | None:
        """The job's goodput model, or None until the agent has fitted throughput and measured the gradient."""
        if self.throughput_params is None or self.grad_stats is None:
            return None
        return GoodputFunction(self.throughput_params, self.grad_stats, self.init_batch_size)

    def to_json_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data, as written to the file (and kept by the state store)."""
        data: dict[str, Any] = _ADAPTER.dump_python(self, mode="json")
        return data

    @classmethod
    def from_json_dict(cls, data: Any, source: str = "<report>") -> JobReport:
        """Validate a decoded report; every failure names `source`, the field and what is accepted."""
        try:
            return _ADAPTER.validate_python(data)
        except ValidationError as error:
            raise _report_error(error, source) from None


_ADAPTER = TypeAdapter(JobReport)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of what a reader accepts (docs/agent-report-schema.md describes each field; a writer adds
    `batch.total_batch_size`, which readers recompute)."""
    schema = _ADAPTER.json_schema()
    envelope = {"schema": {"const": SCHEMA_NAME}, "version": {"type": "integer", "minimum": 1}}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **schema,
        "title": f"{SCHEMA_NAME}, version {SCHEMA_VERSION}",
        "properties": {**envelope, **schema["properties"]},
        "required": [*envelope, *schema["required"]],
    }


def _report_error(error: ValidationError, source: str) -> ReportError:
    """Pydantic's first problem as our one line: the file, the field, what it accepts."""
    problem = first_problem(error)
    where = f"field '{problem.field}'" if problem.field else "the report"
    if problem.kind == "syntax":
        return ReportError(f"{source}: not valid JSON ({problem.text})")
    if problem.kind == "missing":
        return ReportError(f"{source}: missing {where}")
    if problem.kind == "rule":
        return ReportError(f"{source}: {problem.text}" if not problem.field else f"{source}: {where} {problem.text}")
    return ReportError(f"{source}: {where} must be {problem.text}, got {problem.value!r}")


def params_json(params: ThroughputParams) -> dict[str, float]:
    """A throughput model as the report (and the scheduler's bootstrap for the agent) writes it."""
    return PARAMS.to_json(params)


def write_report(path: str | os.PathLike[str], report: JobReport) -> Path:
    """Write `report` as JSON, atomically (write-then-rename, no fsync), so the scheduler never reads half a file."""
    return write_atomic(path, (json.dumps(report.to_json_dict(), indent=2) + "\n").encode(), durable=False)


def read_report(path: str | os.PathLike[str]) -> JobReport:
    """Read and validate a report file; raises `ReportError` naming the file and field on any problem."""
    source = os.fspath(path)
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise ReportError(f"{source}: cannot read the job report ({exc.strerror or exc})") from exc
    try:
        return _ADAPTER.validate_json(text)
    except ValidationError as error:
        raise _report_error(error, source) from None
