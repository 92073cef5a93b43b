"""Experiment specifications: what `pollux tune EXPERIMENT.toml` searches, validated before anything starts.

An experiment is a hyper-parameter search (Pollux §5.4.2) whose every trial is one Pollux job. It maps onto Ray
Tune's own terms (`pollux.runtime.tune`): the search space, the searcher and the early stopper are data handed to
one `Tuner`. A TOML file, read into the pydantic model `ExperimentSpec`:

    name = "digits-hpo"          # the experiment; its trials' jobs are named NAME-<trial id> (8 hex digits)
    metric = "accuracy"          # the name the script reports (`pollux.agent.report_metric(accuracy=..., step=...)`)
    mode = "max"                 # or "min"
    trials = 6                   # how many trials in all
    concurrency = 2              # how many run at once (1 .. trials)
    search = "tpe"               # "tpe" (HyperOpt's TPE through Ray Tune) or "random"
    initial_random_trials = 2    # optional: TPE's random trials before it models (default min(20, max(2, trials // 3)))
    seed = 0                     # optional: the searcher's seed
    tenant = "vision"            # optional: the tenant its jobs belong to (`pollux up --tenants`)
    storage_path = "runs"        # optional: Tune's experiment checkpoints (default: <state dir>/experiments)

    [space]                      # one table per hyper-parameter
    lr = { type = "loguniform", low = 1e-3, high = 0.3 }
    momentum = { type = "uniform", low = 0.5, high = 0.99 }
    batch_size = { type = "choice", values = [16, 32, 64] }
    hidden = { type = "int", low = 32, high = 256 }   # integers low..high, both included

    [asha]                       # optional: early stopping by ASHA, counting the script's reports
    grace_period = 1             # reports every trial makes before it may be stopped
    reduction_factor = 3         # 1/reduction_factor of the trials go on at each rung
    max_t = 100                  # reports after which any trial is stopped

    [job]                        # a job spec (`pollux spec --help`) without name, tenant, experiment, trial
    command = ["python", "train.py", "--lr", "{lr}", "--batch-size", "{batch_size}"]
    init_batch_size = "{batch_size}"
    max_batch_size = 512

How a trial's hyper-parameters reach the script: `{NAME}` in any string of `[job]` is replaced by the trial's value
of parameter NAME (Python's `str.format`: `{lr:.4g}` formats it, `{{` is a brace), and a field of `[job]` that is
exactly `"{NAME}"` becomes the value itself, of its own type, so `init_batch_size = "{batch_size}"` gives the job the
trial's M0 (the command's arguments stay strings). The job spec is validated at the space's two corners (every
parameter at its low end, or first choice; then at its high end, or last choice), so a template no trial could run
is refused before any trial starts. Every error names the file and the field, in one line (`SpecError`).
"""

from __future__ import annotations

import re
import string
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.dataclasses import dataclass

from pollux.errors import SpecError
from pollux.runtime.spec import JobSpec, Matching, Name, parse_spec
from pollux.validation import first_problem, invalid, rule

TRIAL_ID_LENGTH = 8  # Ray Tune's trial ids: 8 hex digits
SET_BY_TUNE = ("name", "experiment", "trial")  # fields of a trial's job that `pollux tune` sets
# Keys Ray Tune puts in every result, and the step `pollux tune` adds: a metric of the script cannot take them.
RESERVED_METRICS = ("step", "done", "training_iteration", "trial_id", "timestamp", "time_total_s", "time_this_iter_s")
CONFIG = ConfigDict(extra="forbid", defer_build=True)
Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
PositiveInt = Annotated[StrictInt, Field(ge=1)]
# A job name NAME-<trial id> must stay a job name: 63 characters at most.
EXPERIMENT_PATTERN = re.compile(rf"^[a-z0-9]([a-z0-9-]{{0,{60 - TRIAL_ID_LENGTH}}}[a-z0-9])?$")
ExperimentName = Annotated[
    str, Matching(EXPERIMENT_PATTERN, f"lowercase letters, digits and '-', 1-{62 - TRIAL_ID_LENGTH} characters")
]


@dataclass(frozen=True, config=CONFIG)
class Uniform:
    """A real number drawn uniformly in [low, high]."""

    type: Literal["uniform"]
    low: Number
    high: Number

    @model_validator(mode="after")
    def _ordered(self) -> Uniform:
        return _ordered(self)


@dataclass(frozen=True, config=CONFIG)
class LogUniform:
    """A real number whose logarithm is uniform in [log low, log high] (learning rates): low > 0."""

    type: Literal["loguniform"]
    low: Number
    high: Number

    @model_validator(mode="after")
    def _ordered(self) -> LogUniform:
        if self.low <= 0:
            raise rule(f"{self.low} must be > 0 on a log scale; use uniform for a range reaching 0", "low")
        return _ordered(self)


@dataclass(frozen=True, config=CONFIG)
class IntRange:
    """An integer drawn uniformly in low..high, both included."""

    type: Literal["int"]
    low: StrictInt
    high: StrictInt

    @model_validator(mode="after")
    def _ordered(self) -> IntRange:
        return _ordered(self)


Scalar = StrictBool | StrictInt | StrictFloat | StrictStr


@dataclass(frozen=True, config=CONFIG)
class Choice:
    """One of `values`, each as likely."""

    type: Literal["choice"]
    values: Annotated[tuple[Scalar, ...], Field(min_length=1)]


Parameter = Annotated[Uniform | LogUniform | IntRange | Choice, Field(discriminator="type")]
DISTRIBUTIONS = ("uniform", "loguniform", "int", "choice")


Ranged = TypeVar("Ranged", Uniform, LogUniform, IntRange)


def _ordered(parameter: Ranged) -> Ranged:
    if parameter.low >= parameter.high:
        raise rule(f"{parameter.low} must be below high {parameter.high}; swap them or widen the range", "low")
    return parameter


def corners(space: dict[str, Parameter]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The space's two corners: every parameter at its low end (first choice), and at its high end (last choice)."""
    low = {n: p.values[0] if isinstance(p, Choice) else p.low for n, p in space.items()}
    high = {n: p.values[-1] if isinstance(p, Choice) else p.high for n, p in space.items()}
    return low, high


@dataclass(frozen=True, config=CONFIG)
class Asha:
    """ASHA's knobs (Li et al., MLSys'20, as Ray Tune's `ASHAScheduler`), counted in the script's reports."""

    grace_period: PositiveInt = 1
    reduction_factor: Annotated[float, Field(gt=1.0, allow_inf_nan=False)] = 3.0
    max_t: PositiveInt = 100

    @model_validator(mode="after")
    def _grace_within_max(self) -> Asha:
        if self.grace_period > self.max_t:
            raise rule(f"{self.grace_period} exceeds max_t {self.max_t}; lower grace_period", "grace_period")
        return self


def _placeholders(value: Any, where: str) -> list[tuple[str, str]]:
    """(field, parameter) for every `{NAME}` in the strings of a job table, read as `str.format` reads them."""
    if isinstance(value, str):
        try:
            return [(where, field) for _, field, _, _ in string.Formatter().parse(value) if field is not None]
        except ValueError as error:
            raise invalid(
                f"a string whose braces are placeholders {{NAME}} or doubled ({error})", value, where
            ) from None
    if isinstance(value, list):
        return [found for i, item in enumerate(value) for found in _placeholders(item, f"{where}[{i}]")]
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in _placeholders(item, f"{where}.{key}")]
    return []


def fill(value: Any, config: dict[str, Any]) -> Any:
    """A value of a job table with a trial's values put in as text (the module docstring says how)."""
    if isinstance(value, str):
        return value.format(**config)
    if isinstance(value, list):
        return [fill(item, config) for item in value]
    if isinstance(value, dict):
        return {key: fill(item, config) for key, item in value.items()}
    return value


def fill_job(job: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """A job table with a trial's values put in: a field that is exactly `"{NAME}"` takes the value itself, of its
    own type; any other string, and every string inside a list or table (the command's arguments), as text."""

    def field(value: Any) -> Any:
        whole = isinstance(value, str) and value.startswith("{") and value.endswith("}") and value[1:-1] in config
        return config[value[1:-1]] if whole else fill(value, config)

    return {key: field(value) for key, value in job.items()}


@dataclass(frozen=True, config=CONFIG)
class ExperimentSpec:
    """A validated experiment (see the module docstring for the file format)."""

    name: ExperimentName
    metric: StrictStr
    mode: Literal["max", "min"]
    trials: PositiveInt
    space: Annotated[dict[str, Parameter], Field(min_length=1)]
    job: dict[str, Any]
    concurrency: PositiveInt = 1
    search: Literal["tpe", "random"] = "tpe"
    initial_random_trials: PositiveInt | None = None
    seed: StrictInt | None = None
    tenant: Name | None = None
    storage_path: Path | None = None
    asha: Asha | None = None
    workdir: Path = Path()  # the spec file's folder (set when read): where the job's paths are relative to

    @field_validator("metric")
    @classmethod
    def _reportable(cls, metric: str) -> str:
        if not metric.isidentifier():
            raise invalid("a name the script reports, report_metric(NAME=value): a Python identifier", metric)
        if metric in RESERVED_METRICS:
            raise rule(f"{metric!r} is a key Ray Tune or pollux tune sets itself; report it under another name")
        return metric

    @field_validator("space")
    @classmethod
    def _names(cls, space: dict[str, Parameter]) -> dict[str, Parameter]:
        for name in space:
            if not name.isidentifier():
                raise rule(f"parameter name {name!r} must be a Python identifier (it is a {{NAME}} in [job])")
        return space

    @model_validator(mode="after")
    def _concurrency(self) -> ExperimentSpec:
        if self.concurrency > self.trials:
            raise rule(f"{self.concurrency} exceeds trials {self.trials}; lower concurrency", "concurrency")
        return self

    @model_validator(mode="after")
    def _a_job_every_trial_can_run(self, info: ValidationInfo) -> ExperimentSpec:
        """The job table names only parameters of the space, leaves what `pollux tune` sets, and makes a valid job
        spec at both corners of the space."""
        for field in (*SET_BY_TUNE, "tenant"):
            if field in self.job:
                where = "the experiment's `tenant`" if field == "tenant" else "pollux tune (experiment name, trial id)"
                raise rule(f"is set by {where}; remove it from [job]", f"job.{field}")
        for where, parameter in _placeholders(self.job, "job"):
            if parameter not in self.space:
                raise rule(
                    f"{{{parameter}}} names no parameter of [space] ({', '.join(self.space)}); write {{{{ for a brace",
                    where,
                )
        source = (info.context or {}).get("source", "<experiment>")
        for corner in corners(self.space):
            said = ", ".join(f"{k}={v!r}" for k, v in corner.items())
            self.trial_spec(corner, "0" * TRIAL_ID_LENGTH, f"{source}, [job] with {said}")
        return self

    def trial_fields(self, config: dict[str, Any], trial_id: str) -> dict[str, Any]:
        """The fields of one trial's job spec: [job] with the trial's values, its name, experiment and trial."""
        fields = {**fill_job(self.job, config), "name": f"{self.name}-{trial_id}", "experiment": self.name}
        fields["trial"] = trial_id
        return fields if self.tenant is None else {**fields, "tenant": self.tenant}

    def trial_spec(self, config: dict[str, Any], trial_id: str, source: str) -> JobSpec:
        """One trial's job spec, validated as `pollux submit` validates any (`SpecError` naming `source`)."""
        return parse_spec(self.trial_fields(config, trial_id), source, self.workdir)

    def initial_points(self) -> int:
        """TPE's random trials before it models the metric (HyperOpt's own default is 20)."""
        return self.initial_random_trials or min(20, max(2, self.trials // 3))

    def storage(self, state_dir: Path) -> Path:
        """Where Ray Tune keeps this experiment's checkpoints (its folder is `name` in there)."""
        if self.storage_path is None:
            return state_dir / "experiments"
        return self.storage_path if self.storage_path.is_absolute() else self.workdir / self.storage_path


_ADAPTER = TypeAdapter(ExperimentSpec)


def parse_experiment(data: dict[str, Any], source: str, base: Path) -> ExperimentSpec:
    """Validate an experiment read into a dict; paths in it are relative to `base`."""
    if "workdir" in data:
        raise SpecError(f"{source}: unknown field 'workdir'; the job runs in the experiment file's folder")
    try:
        return _ADAPTER.validate_python({**data, "workdir": base}, context={"source": source})
    except ValidationError as error:
        raise _experiment_error(error, source) from None


def _experiment_error(error: ValidationError, source: str) -> SpecError:
    """Pydantic's first problem as our one line. (A job spec's own error, at a corner of the space, is a `SpecError`
    already, naming the corner: pydantic lets it through as it is.)"""
    problem = first_problem(error)
    parts = problem.field.split(".")
    if parts[0] == "space" and len(parts) > 2 and parts[2] in DISTRIBUTIONS:  # the union's tag, not a field
        problem = replace(problem, field=".".join(parts[:2] + parts[3:]))
    if problem.kind == "unknown":
        return SpecError(f"{source}: unknown field '{problem.field}'; {_accepted(problem.field)}")
    if problem.kind == "missing":
        return SpecError(f"{source}: missing required field '{problem.field}'")
    if problem.kind == "rule":
        return SpecError(f"{source}: field '{problem.field}': {problem.text}")
    if problem.field.startswith("space.") and "tag" in problem.text:
        return SpecError(f"{source}: field '{problem.field}': expected a distribution, one of {DISTRIBUTIONS}")
    return SpecError(f"{source}: field '{problem.field}': expected {problem.text}, got {problem.value!r}")


def _accepted(field: str) -> str:
    """The fields accepted where an unknown one was found."""
    tables = {
        "asha": "grace_period, reduction_factor, max_t",
        "space": "type, low, high (uniform, loguniform, int) or type, values (choice)",
    }
    top = "name, metric, mode, trials, concurrency, search, initial_random_trials, seed, tenant, storage_path"
    table = tables.get(field.split(".")[0]) if "." in field else None
    return f"accepted: {table}" if table else f"accepted fields: {top}, [space], [asha], [job]"


def load_experiment(path: str | Path) -> ExperimentSpec:
    """Read and validate an experiment TOML file; relative paths in it are relative to the file."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"{path}: no such experiment file") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise SpecError(f"{path}: not valid TOML ({error})") from None
    return parse_experiment(data, str(path), path.resolve().parent)
