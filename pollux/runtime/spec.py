"""Job specifications: what a user submits to `pollux submit`, validated before anything is created.

A spec is a TOML file (stdlib `tomllib`), read into the pydantic model `JobSpec`:

    name = "cifar-resnet"                     # lowercase letters, digits and '-', at most 63 characters
    command = ["python", "train.py", "--epochs", "30"]   # or one string, split like a shell would
    adaptive = true                           # false: the job keeps its batch size (efficiency is then 1)
    gpus = 2                                  # the request of fixed-size policies (fifo, tiresias); default 1
    min_gpus = 0                              # 0 lets the scheduler pause it
    max_gpus = 16
    init_batch_size = 128                     # M0
    max_batch_size = 4096
    local_bsz_bounds = [32, 512]              # per-GPU batch the GPU memory allows
    checkpoint_dir = "ckpt/cifar-resnet"      # relative paths are relative to the spec file
    checkpoint_interval_s = 300               # optional: periodic checkpoints (else the service's, else automatic)
    gpu_types = ["a100", "rtx"]               # optional: the GPU types it may run on (default: any)
    single_gpu_throughput = {a100 = 900.0, rtx = 300.0}   # optional: examples/s on one GPU of each type (profile)
    local_bsz_bounds_by_type = {rtx = [32, 128]}           # optional: per-GPU batch bounds where memory differs
    tenant = "vision"                         # optional: the team it belongs to (`pollux up --tenants`); "default"
    experiment = "digits-hpo"                 # optional: the experiment it is a trial of (`pollux tune` sets it)
    trial = "3f2a9c01"                        # optional: its trial in that experiment (`pollux tune` sets it)

`pollux spec schema` prints the JSON Schema of this form (`json_schema()`), for editors to complete and check a spec.
The GPU types are checked against the cluster's when the service accepts the job (`check_gpu_types`): an unknown
type is named with the types the cluster has.

Every error names the file, the field and what is accepted, so a bad spec is refused before a job exists; pydantic's
errors become those one-line `SpecError`s in `_spec_error`.
"""

from __future__ import annotations

import functools
import re
import shlex
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    StrictBool,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.dataclasses import dataclass
from pydantic.json_schema import JsonSchemaValue, SkipJsonSchema
from pydantic_core import CoreSchema, core_schema

from pollux.errors import SpecError
from pollux.tenants import DEFAULT_TENANT
from pollux.validation import Bounds, first_problem, invalid, rule, unknown

NAME_PATTERN = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
TYPE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
LEGACY_FIELDS = ("priority", "owner")  # in specs stored by older versions; never read, dropped when read back


class Matching:
    """Annotates a string that must match `pattern`: an error says `accepted`, the JSON Schema has the pattern."""

    def __init__(self, pattern: re.Pattern[str], accepted: str) -> None:
        self.pattern, self.accepted = pattern, accepted

    def check(self, value: Any) -> Any:
        if not (isinstance(value, str) and self.pattern.match(value)):
            raise invalid(self.accepted, value)
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_before_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {"type": "string", "pattern": self.pattern.pattern, "description": self.accepted}


def _first_each(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


Name = Annotated[str, Matching(NAME_PATTERN, "lowercase letters, digits and '-', 1-63 characters")]
TypeName = Annotated[str, Matching(TYPE_NAME, 'a GPU type name such as "a100"')]
PositiveInt = Annotated[StrictInt, Field(ge=1)]
Seconds = Annotated[float, Field(gt=0.0, strict=True, allow_inf_nan=False)]


@dataclass(frozen=True, config=ConfigDict(extra="forbid", use_attribute_docstrings=True, defer_build=True))
class JobSpec:
    """A validated job specification (see the module docstring for the file format)."""

    name: Name
    """The job's name: lowercase letters, digits and '-', at most 63 characters."""
    command: Annotated[tuple[StrictStr, ...], Field(min_length=1)]
    """The command (a list, or one string split like a shell would); a `.py` in it must exist beside the spec."""
    init_batch_size: PositiveInt
    """M0: the total batch size the learning rate was tuned for."""
    max_batch_size: StrictInt = Field(default_factory=lambda data: data.get("init_batch_size", 1))
    """The largest total batch size the job accepts (default: init_batch_size)."""
    local_bsz_bounds: Bounds = Field(default_factory=lambda data: (1, data.get("max_batch_size", 1)))
    """[min, max] per-GPU batch the GPU memory allows (default: [1, max_batch_size])."""

    @model_validator(mode="after")
    def _batch_sizes(self, info: ValidationInfo) -> JobSpec:
        """The total max frames every other batch size: a bound past it is the bound's error, not the max's."""
        if self.init_batch_size > self.max_batch_size:
            raise rule(
                f"{self.init_batch_size} exceeds max_batch_size {self.max_batch_size}; lower init_batch_size or "
                "raise max_batch_size",
                "init_batch_size",
            )
        if not _submitted(info):
            return self
        named = {"local_bsz_bounds": self.local_bsz_bounds}
        named |= {f"local_bsz_bounds_by_type.{t}": b for t, b in self.local_bsz_bounds_by_type.items()}
        for field, (_, most) in named.items():
            if most > self.max_batch_size:
                raise rule(
                    f"per-GPU max {most} exceeds max_batch_size {self.max_batch_size} (one GPU's batch is part of "
                    f"the total); lower it to at most {self.max_batch_size} or raise max_batch_size",
                    field,
                )
        return self

    min_gpus: Annotated[StrictInt, Field(ge=0)] = 0
    """The fewest GPUs it may run on; 0 lets the scheduler pause it."""
    max_gpus: PositiveInt = 64
    """The most GPUs it may run on."""
    gpus: PositiveInt = Field(default_factory=lambda data: max(data.get("min_gpus", 0), 1))
    """The request of fixed-size policies (fifo, tiresias); default max(min_gpus, 1)."""

    @model_validator(mode="after")
    def _gpu_counts(self, info: ValidationInfo) -> JobSpec:
        """max_gpus frames the other counts, as max_batch_size frames the batch sizes."""
        if self.min_gpus > self.max_gpus:
            raise rule(
                f"{self.min_gpus} exceeds max_gpus {self.max_gpus}; lower min_gpus or raise max_gpus", "min_gpus"
            )
        least = max(self.min_gpus, 1)
        if self.gpus < least:
            raise invalid(f"an integer >= {least}", self.gpus, "gpus")
        if self.gpus > self.max_gpus:
            raise rule(f"{self.gpus} exceeds max_gpus {self.max_gpus}; lower gpus or raise max_gpus", "gpus")
        counts = {"min_gpus": self.min_gpus, **({"gpus": self.gpus} if _submitted(info) else {})}
        for field, count in counts.items():
            if count * self.local_bsz_bounds[0] > self.max_batch_size:
                raise rule(
                    f"{count} GPUs x local_bsz_bounds min {self.local_bsz_bounds[0]} exceed max_batch_size "
                    f"{self.max_batch_size}; lower {field} or raise max_batch_size",
                    field,
                )
        return self

    adaptive: StrictBool = True
    """false: the job keeps its batch size (its statistical efficiency is then 1)."""
    checkpoint_dir: Path | None = None
    """Where its checkpoints go (relative to the spec file); default: the service's state directory."""
    checkpoint_interval_s: Seconds | None = None
    """Seconds between periodic checkpoints; default: the service's setting, else the agent's cost-based one."""
    workdir: SkipJsonSchema[Path | None] = None
    """Where the command runs: the spec file's folder (set when read, not written in the file)."""
    gpu_types: Annotated[tuple[TypeName, ...], Field(min_length=1), AfterValidator(_first_each)] | None = None
    """The GPU types it may run on; default: any."""
    single_gpu_throughput: dict[TypeName, Annotated[float, Field(gt=0.0, strict=True)]] = Field(default_factory=dict)
    """Examples/s on one GPU of each type (a profile), for the policies' first guess."""
    local_bsz_bounds_by_type: dict[TypeName, Bounds] = Field(default_factory=dict)
    """[min, max] per-GPU batch on the types whose memory differs from local_bsz_bounds."""
    tenant: Name = DEFAULT_TENANT
    """The team it belongs to, one the service's tenants file names (`pollux up --tenants`); default: "default"."""
    experiment: Name | None = None
    """The experiment it is a trial of (`pollux tune` sets it): `pollux ls` and the dashboard group its jobs."""
    trial: Name | None = None
    """Its trial in that experiment (the Ray Tune trial id; `pollux tune` sets it)."""

    @model_validator(mode="after")
    def _types_it_may_run_on(self, info: ValidationInfo) -> JobSpec:
        """A throughput or bounds for a type outside gpu_types would never be used: a typo, most likely."""
        if self.gpu_types is None or not _submitted(info):
            return self
        for field in ("single_gpu_throughput", "local_bsz_bounds_by_type"):
            for gpu_type in getattr(self, field):
                if gpu_type not in self.gpu_types:
                    raise rule(
                        f"{gpu_type!r} is not one of gpu_types ({', '.join(self.gpu_types)}); add it to gpu_types "
                        "or remove it here",
                        f"{field}.{gpu_type}",
                    )
        return self

    @model_validator(mode="before")
    @classmethod
    def _read_from_a_file(cls, data: Any, info: ValidationInfo) -> Any:
        """A spec read from a file (`base` in the context) runs in the file's folder, which the file cannot set."""
        base = (info.context or {}).get("base")
        if base is None or not isinstance(data, dict):
            return data
        if "workdir" in data:
            raise unknown("workdir")
        return {**data, "workdir": base}

    @field_validator("command", mode="before", json_schema_input_type=str | list[str])
    @classmethod
    def _split(cls, value: Any) -> Any:
        parts = shlex.split(value) if isinstance(value, str) else value
        if not (isinstance(parts, list | tuple) and all(isinstance(part, str) for part in parts)):
            raise invalid("a string or a list of strings", value)
        if not parts:
            raise rule('must not be empty; e.g. ["python", "train.py"]')
        return parts

    @field_validator("command")
    @classmethod
    def _scripts_exist(cls, command: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        base: Path | None = (info.context or {}).get("base")
        missing = [part for part in command if base and part.endswith(".py") and not (base / part).is_file()]
        if missing:
            raise rule(f"script {missing[0]!r} not found (looked in {base})")
        return command

    @field_validator("checkpoint_dir")
    @classmethod
    def _relative_to_the_file(cls, path: Path | None, info: ValidationInfo) -> Path | None:
        base = (info.context or {}).get("base")
        return path if path is None or base is None else base / path

    def to_json_dict(self) -> dict[str, Any]:
        """The spec as JSON-ready data (paths as strings), as the state store keeps it."""
        data: dict[str, Any] = _ADAPTER.dump_python(self, mode="json")
        return data

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any], source: str = "<stored spec>") -> JobSpec:
        """Inverse of `to_json_dict`; a spec stored by an older version may still carry `LEGACY_FIELDS`."""
        return _validate({k: v for k, v in data.items() if k not in LEGACY_FIELDS}, source, None)


_ADAPTER = TypeAdapter(JobSpec)


def _submitted(info: ValidationInfo) -> bool:
    """Whether a user submits this spec (read from a file or text), not the store reads one back. Rules added since
    a spec could be stored are checked on submission only: a job accepted before stays readable."""
    return bool(info.context and "base" in info.context)


@functools.cache
def json_schema() -> dict[str, Any]:
    """The JSON Schema of the TOML form a user writes (`pollux spec schema`): what editors complete and check."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **_ADAPTER.json_schema(),
        "title": "Pollux job spec",
        "description": "A job for `pollux submit JOB.toml` (pollux/runtime/spec.py).",
    }


def _validate(data: Any, source: str, base: Path | None) -> JobSpec:
    try:
        return _ADAPTER.validate_python(data, context=None if base is None else {"base": base})
    except ValidationError as error:
        raise _spec_error(error, source) from None


def _spec_error(error: ValidationError, source: str) -> SpecError:
    """Pydantic's first problem as our one line: the file, the field, what it accepts (or the rule), the fix."""
    problem = first_problem(error)
    if problem.kind == "unknown":
        accepted = ", ".join(json_schema()["properties"])
        return SpecError(f"{source}: unknown field '{problem.field}'; accepted fields: {accepted}")
    if problem.kind == "missing":
        required = ", ".join(json_schema()["required"])
        return SpecError(f"{source}: missing required field '{problem.field}' (required: {required})")
    if problem.kind == "rule":
        return SpecError(f"{source}: field '{problem.field}': {problem.text}")
    return SpecError(f"{source}: field '{problem.field}': expected {problem.text}, got {problem.value!r}")


def check_gpu_types(spec: JobSpec, cluster_types: Sequence[str], gpus_of_type: Mapping[str, int]) -> None:
    """Refuse a job whose GPU types the cluster cannot give it: an unknown type (named with the cluster's types),
    or fewer GPUs of its types than its `min_gpus`. `cluster_types` are every type the cluster has or can start."""
    named = [*(spec.gpu_types or ()), *spec.single_gpu_throughput, *spec.local_bsz_bounds_by_type]
    for gpu_type in named:
        if gpu_type not in cluster_types:
            raise SpecError(
                f"job {spec.name!r}: GPU type {gpu_type!r} is not in this cluster (its types: "
                f"{', '.join(cluster_types)}); use those names in gpu_types, single_gpu_throughput and "
                "local_bsz_bounds_by_type"
            )
    usable = spec.gpu_types or tuple(cluster_types)
    most = max(gpus_of_type.get(t, 0) for t in usable)
    if spec.min_gpus > most:
        raise SpecError(
            f"job {spec.name!r}: field 'min_gpus' {spec.min_gpus} exceeds the {most} GPUs this cluster can give one "
            f"job of type(s) {', '.join(usable)}; lower min_gpus or allow more gpu_types"
        )


def parse_spec(data: dict[str, Any], source: str = "<spec>", base: Path | None = None) -> JobSpec:
    """Validate a spec already read into a dict; `base` resolves relative paths (default: current directory)."""
    return _validate(data, source, base or Path.cwd())


def load_spec(path: str | Path) -> JobSpec:
    """Read and validate a TOML job spec; relative paths in it are relative to the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: no such spec file") from None
    except UnicodeDecodeError as error:
        raise SpecError(f"{path}: not valid TOML ({error})") from None
    return loads_spec(text, str(path), path.resolve().parent)


def loads_spec(text: str, source: str = "<spec>", base: Path | None = None, tenant: str | None = None) -> JobSpec:
    """Validate a spec given as TOML text (what `pollux submit` sends to the service); a `tenant` given
    (`pollux submit --tenant`) overrides the spec's."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise SpecError(f"{source}: not valid TOML ({error})") from None
    return parse_spec(data if tenant is None else {**data, "tenant": tenant}, source, base)
