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

Every error names the file, the field and what is accepted, so a bad spec is refused before a job exists.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import dataclass
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
)
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

    def to_json_dict(self) -> dict[str, Any]:
        """The spec as JSON-ready data (paths as strings), as the state store keeps it."""
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["command"] = list(self.command)
        data["local_bsz_bounds"] = list(self.local_bsz_bounds)
        for key in ("checkpoint_dir", "workdir"):
            data[key] = None if data[key] is None else str(data[key])
        return data

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> JobSpec:
        """Inverse of `to_json_dict` (the data was validated when it was submitted)."""
        values = dict(data)
        values["command"] = tuple(values["command"])
        values["local_bsz_bounds"] = tuple(values["local_bsz_bounds"])
        for key in ("checkpoint_dir", "workdir"):
            values[key] = None if values.get(key) is None else Path(values[key])
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
