"""Job specifications: what a user submits to `pollux submit`, validated before anything is created.

A spec is a TOML file (stdlib `tomllib`, no extra dependency):

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
    priority = 0                              # optional
    owner = "alice"                           # optional
    gpu_types = ["a100", "rtx"]               # optional: the GPU types it may run on (default: any)
    single_gpu_throughput = {a100 = 900.0, rtx = 300.0}   # optional: examples/s on one GPU of each type (profile)
    local_bsz_bounds_by_type = {rtx = [32, 128]}           # optional: per-GPU batch bounds where memory differs

The GPU types are checked against the cluster's when the service accepts the job (`check_gpu_types`): an unknown
type is named with the types the cluster has.

Every error names the file, the field and what is accepted, so a bad spec is refused before a job exists.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pollux.errors import SpecError

NAME_PATTERN = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
FIELDS = (
    "name",
    "command",
    "adaptive",
    "gpus",
    "min_gpus",
    "max_gpus",
    "init_batch_size",
    "max_batch_size",
    "local_bsz_bounds",
    "checkpoint_dir",
    "checkpoint_interval_s",
    "priority",
    "owner",
    "gpu_types",
    "single_gpu_throughput",
    "local_bsz_bounds_by_type",
)
TYPE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
REQUIRED = ("name", "command", "init_batch_size")


@dataclass(frozen=True)
class JobSpec:
    """A validated job specification (see the module docstring for the file format)."""

    name: str
    command: tuple[str, ...]
    init_batch_size: int
    max_batch_size: int
    local_bsz_bounds: tuple[int, int]
    min_gpus: int = 0
    max_gpus: int = 64
    gpus: int = 1  # requested GPUs, kept by policies that do not change GPU counts
    adaptive: bool = True
    checkpoint_dir: Path | None = None
    checkpoint_interval_s: float | None = None  # None: the service's setting, else the agent's cost-based default
    priority: int = 0
    owner: str | None = None
    workdir: Path | None = None  # where the command runs: the spec file's folder
    gpu_types: tuple[str, ...] | None = None  # the GPU types it may run on; None: any
    single_gpu_throughput: dict[str, float] = field(default_factory=dict)  # examples/s on 1 GPU per type (profile)
    local_bsz_bounds_by_type: dict[str, tuple[int, int]] = field(default_factory=dict)  # where memory differs

    def to_json_dict(self) -> dict[str, Any]:
        """The spec as JSON-ready data (paths as strings), as the state store keeps it."""
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["command"] = list(self.command)
        data["local_bsz_bounds"] = list(self.local_bsz_bounds)
        for key in ("checkpoint_dir", "workdir"):
            data[key] = None if data[key] is None else str(data[key])
        data["gpu_types"] = None if self.gpu_types is None else list(self.gpu_types)
        data["single_gpu_throughput"] = dict(self.single_gpu_throughput)
        data["local_bsz_bounds_by_type"] = {t: list(b) for t, b in self.local_bsz_bounds_by_type.items()}
        return data

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> JobSpec:
        """Inverse of `to_json_dict` (the data was validated when it was submitted)."""
        values = dict(data)
        values["command"] = tuple(values["command"])
        values["local_bsz_bounds"] = tuple(values["local_bsz_bounds"])
        for key in ("checkpoint_dir", "workdir"):
            values[key] = None if values.get(key) is None else Path(values[key])
        if values.get("gpu_types") is not None:
            values["gpu_types"] = tuple(values["gpu_types"])
        values["local_bsz_bounds_by_type"] = {
            t: (int(b[0]), int(b[1])) for t, b in (values.get("local_bsz_bounds_by_type") or {}).items()
        }
        return cls(**{k: v for k, v in values.items() if k in cls.__dataclass_fields__})


def _int(source: str, field: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(f"{source}: field '{field}': expected an integer >= {minimum}, got {value!r}")
    return value


def _command(source: str, value: Any, base: Path) -> tuple[str, ...]:
    if isinstance(value, str):
        parts = tuple(shlex.split(value))
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        parts = tuple(value)
    else:
        raise SpecError(f"{source}: field 'command': expected a string or a list of strings, got {value!r}")
    if not parts:
        raise SpecError(f'{source}: field \'command\': must not be empty; e.g. ["python", "train.py"]')
    for part in parts:
        if part.endswith(".py") and not (base / part).is_file():
            raise SpecError(f"{source}: field 'command': script {part!r} not found (looked in {base})")
    return parts


def _type_name(source: str, where: str, value: Any) -> str:
    if not isinstance(value, str) or not TYPE_NAME.match(value):
        raise SpecError(f"{source}: field '{where}': expected a GPU type name such as \"a100\", got {value!r}")
    return value


def _gpu_types(source: str, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise SpecError(f"{source}: field 'gpu_types': expected a non-empty list of type names, e.g. [\"a100\"]")
    return tuple(dict.fromkeys(_type_name(source, "gpu_types", v) for v in value))


def _throughputs(source: str, value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        raise SpecError(
            f"{source}: field 'single_gpu_throughput': expected a table {{type = examples/s}}, got {value!r}"
        )
    speeds = {}
    for key, speed in value.items():
        _type_name(source, "single_gpu_throughput", key)
        if isinstance(speed, bool) or not isinstance(speed, int | float) or not speed > 0:
            raise SpecError(
                f"{source}: field 'single_gpu_throughput.{key}': expected examples/s > 0 (e.g. 300.0), got {speed!r}"
            )
        speeds[key] = float(speed)
    return speeds


def _bounds_by_type(source: str, value: Any) -> dict[str, tuple[int, int]]:
    if not isinstance(value, dict):
        raise SpecError(f"{source}: field 'local_bsz_bounds_by_type': expected a table {{type = [min, max]}}")
    bounds = {}
    for key, pair in value.items():
        where = f"local_bsz_bounds_by_type.{key}"
        _type_name(source, "local_bsz_bounds_by_type", key)
        if not (isinstance(pair, list) and len(pair) == 2):
            raise SpecError(f"{source}: field '{where}': expected [min, max], got {pair!r}")
        low = _int(source, where, pair[0], 1)
        bounds[key] = (low, _int(source, where, pair[1], low))
    return bounds


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
    base = base or Path.cwd()
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise SpecError(f"{source}: unknown field '{unknown[0]}'; accepted fields: {', '.join(FIELDS)}")
    missing = [f for f in REQUIRED if f not in data]
    if missing:
        raise SpecError(f"{source}: missing required field '{missing[0]}' (required: {', '.join(REQUIRED)})")
    name = data["name"]
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise SpecError(
            f"{source}: field 'name': expected lowercase letters, digits and '-', 1-63 characters, got {name!r}"
        )
    command = _command(source, data["command"], base)
    init_bsz = _int(source, "init_batch_size", data["init_batch_size"], 1)
    max_bsz = _int(source, "max_batch_size", data.get("max_batch_size", init_bsz), init_bsz)
    bounds = data.get("local_bsz_bounds", [1, max_bsz])
    if not (isinstance(bounds, list) and len(bounds) == 2):
        raise SpecError(f"{source}: field 'local_bsz_bounds': expected [min, max], got {bounds!r}")
    low = _int(source, "local_bsz_bounds", bounds[0], 1)
    high = _int(source, "local_bsz_bounds", bounds[1], low)
    min_gpus = _int(source, "min_gpus", data.get("min_gpus", 0), 0)
    max_gpus = _int(source, "max_gpus", data.get("max_gpus", 64), max(min_gpus, 1))
    gpus = _int(source, "gpus", data.get("gpus", max(min_gpus, 1)), max(min_gpus, 1))
    if gpus > max_gpus:
        raise SpecError(f"{source}: field 'gpus': {gpus} exceeds max_gpus {max_gpus}; lower gpus or raise max_gpus")
    if min_gpus * low > max_bsz:
        raise SpecError(
            f"{source}: field 'min_gpus': {min_gpus} GPUs x local_bsz_bounds min {low} exceed max_batch_size "
            f"{max_bsz}; lower min_gpus or raise max_batch_size"
        )
    adaptive = data.get("adaptive", True)
    if not isinstance(adaptive, bool):
        raise SpecError(f"{source}: field 'adaptive': expected true or false, got {adaptive!r}")
    checkpoint = data.get("checkpoint_dir")
    if checkpoint is not None and not isinstance(checkpoint, str):
        raise SpecError(f"{source}: field 'checkpoint_dir': expected a path string, got {checkpoint!r}")
    interval = data.get("checkpoint_interval_s")
    if interval is not None and (isinstance(interval, bool) or not isinstance(interval, int | float) or interval <= 0):
        raise SpecError(f"{source}: field 'checkpoint_interval_s': expected seconds > 0 (e.g. 300), got {interval!r}")
    owner = data.get("owner")
    if owner is not None and not isinstance(owner, str):
        raise SpecError(f"{source}: field 'owner': expected a string, got {owner!r}")
    priority = data.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise SpecError(f"{source}: field 'priority': expected an integer, got {priority!r}")
    gpu_types = _gpu_types(source, data.get("gpu_types"))
    speeds = _throughputs(source, data.get("single_gpu_throughput", {}))
    bounds_by_type = _bounds_by_type(source, data.get("local_bsz_bounds_by_type", {}))
    return JobSpec(
        name=name,
        command=command,
        init_batch_size=init_bsz,
        max_batch_size=max_bsz,
        local_bsz_bounds=(low, high),
        min_gpus=min_gpus,
        max_gpus=max_gpus,
        gpus=gpus,
        adaptive=adaptive,
        checkpoint_dir=None if checkpoint is None else (base / checkpoint),
        checkpoint_interval_s=None if interval is None else float(interval),
        priority=priority,
        owner=owner,
        workdir=base,
        gpu_types=gpu_types,
        single_gpu_throughput=speeds,
        local_bsz_bounds_by_type=bounds_by_type,
    )


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


def loads_spec(text: str, source: str = "<spec>", base: Path | None = None) -> JobSpec:
    """Validate a spec given as TOML text (what `pollux submit` sends to the service)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise SpecError(f"{source}: not valid TOML ({error})") from None
    return parse_spec(data, source, base)
