"""Typed view of one model's measured profile (an artifact's `profiles/<model>/` folder).

The Pollux artifact measured each model on one GPU type (T4): `placements.csv`, `scalability.csv`. The Sia artifact
measured them on several, one pair of files per type (`placements-<type>.csv`, `scalability-<type>.csv`; its
`placements.csv` is the `aws` file), with validation runs shared by every type: statistical efficiency does not
depend on the GPU (docs/design.md, "Job models per GPU type"). A `JobProfile` is one model on one type.
The loaders (`load_profile`, `load_typed_profiles`) are below the types; every parse error names file, line and
column.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pollux.data.locate import DATASET, Artifact, find_data_dir
from pollux.errors import ProfileError

MODELS: tuple[str, ...] = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")


@dataclass(frozen=True)
class PlacementRows:
    """`placements.csv`: one row per (placement, local_bsz) measured.

    `placement` holds the digit strings as read (`"1144"`: 4 nodes with 1, 1, 4, 4 GPUs); `num_nodes` and
    `num_replicas` are derived from them.
    """

    placement: tuple[str, ...]
    num_nodes: np.ndarray  # int64
    num_replicas: np.ndarray  # int64
    local_bsz: np.ndarray  # int64
    step_time: np.ndarray  # float64, seconds per iteration
    sync_time: np.ndarray  # float64, seconds of that spent synchronizing


@dataclass(frozen=True)
class ScalabilityRows:
    """`scalability.csv`: step times by counts alone (no per-node layout)."""

    num_nodes: np.ndarray
    num_replicas: np.ndarray
    local_bsz: np.ndarray
    step_time: np.ndarray
    sync_time: np.ndarray


@dataclass(frozen=True)
class ValidationRun:
    """`validation-<M>.csv`: one training run at total batch `batch_size`, one row per epoch."""

    batch_size: int
    progress: np.ndarray  # float64, statistical progress (examples at M0) after each epoch
    iteration: np.ndarray
    metric: np.ndarray
    grad_sqr: np.ndarray  # |g|^2 estimate measured during that epoch
    grad_var: np.ndarray  # tr(Sigma) estimate measured during that epoch


@dataclass(frozen=True)
class JobProfile:
    """Everything measured for one model. `init_batch_size` (M0) is the smallest validated batch size,
    `max_batch_size` the largest."""

    model: str
    placements: PlacementRows
    scalability: ScalabilityRows
    validation: dict[int, ValidationRun]  # keyed by total batch size, ascending
    gpu_type: str | None = None  # the type the step times were measured on; None: the files without a suffix

    @property
    def init_batch_size(self) -> int:
        return min(self.validation)

    @property
    def max_batch_size(self) -> int:
        return max(self.validation)


# ---- loader -------------------------------------------------------------------------------------------------

Parser = Callable[[str], int | float | str]


def _integer(text: str) -> int:
    """An integer, also when written as a whole float (`20.0`, as some of Sia's files have it)."""
    try:
        return int(text)
    except ValueError:
        value = float(text)  # a ValueError here too: not a number at all
        if not value.is_integer():
            raise ValueError(text) from None
        return int(value)


def _number(text: str, integer: bool, minimum: float | None, accepted: str) -> int | float:
    """Parse one cell; the ValueError's text becomes the 'what is wrong' part of the ProfileError."""
    try:
        value: int | float = _integer(text) if integer else float(text)
    except (ValueError, OverflowError):
        raise ValueError(f"not {'an integer' if integer else 'a number'}; expected {accepted}") from None
    if not math.isfinite(value):
        raise ValueError(f"not finite; expected {accepted}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{'negative' if value < 0 else 'zero'} value; expected {accepted}")
    return value


def _count(text: str) -> int | float:
    return _number(text, integer=True, minimum=1, accepted="a positive integer")


def _index(text: str) -> int | float:
    return _number(text, integer=True, minimum=0, accepted="an integer >= 0")


def _non_negative(text: str) -> int | float:
    return _number(text, integer=False, minimum=0.0, accepted="a number >= 0")


def _real(text: str) -> int | float:
    return _number(text, integer=False, minimum=None, accepted="a finite number")


_PLACEMENT = re.compile(r"[1-9]+")


def _placement(text: str) -> str:
    """GPUs per node, one digit per node; nodes with no GPU are left out, so `0` never appears."""
    if not _PLACEMENT.fullmatch(text):
        raise ValueError("not a placement; expected digits 1-9, one per node giving its GPUs (e.g. '1144')")
    return text


PLACEMENT_COLUMNS: dict[str, Parser] = {
    "placement": _placement,
    "local_bsz": _count,
    "step_time": _non_negative,
    "sync_time": _non_negative,
}
SCALABILITY_COLUMNS: dict[str, Parser] = {
    "num_nodes": _count,
    "num_replicas": _count,
    "local_bsz": _count,
    "step_time": _non_negative,
    "sync_time": _non_negative,
}
VALIDATION_COLUMNS: dict[str, Parser] = {
    "progress": _non_negative,
    "iteration": _index,
    "metric": _real,  # a model's own metric (accuracy, F1, WER, ...): any sign is possible
    "grad_sqr": _non_negative,
    "grad_var": _non_negative,
}
_VALIDATION_NAME = re.compile(r"validation-([1-9][0-9]*)\.csv")


def _read_table(path: Path, columns: dict[str, Parser]) -> dict[str, list]:
    """Read a CSV into one list per required column (extra columns are ignored); errors name file:line."""
    expected = ",".join(columns)
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = [name.strip() for name in next(reader, [])]
            if not header:
                raise ProfileError(f"{path}:1: empty file; expected the header {expected}")
            for name in columns:
                if name not in header:
                    raise ProfileError(
                        f"{path}:1: missing column '{name}' (header is {','.join(header)}; expected {expected})"
                    )
            where = {name: header.index(name) for name in columns}
            table: dict[str, list] = {name: [] for name in columns}
            for row in reader:
                if not row:
                    continue
                if len(row) != len(header):
                    raise ProfileError(
                        f"{path}:{reader.line_num}: {len(row)} fields, but the header has {len(header)} ({expected})"
                    )
                for name, parse in columns.items():
                    cell = row[where[name]].strip()
                    try:
                        table[name].append(parse(cell))
                    except ValueError as err:
                        raise ProfileError(f"{path}:{reader.line_num}: column '{name}' = {cell!r}: {err}") from None
    except FileNotFoundError:
        raise ProfileError(f"{path}: missing file; run `pollux data status` to check the data") from None
    except (UnicodeDecodeError, csv.Error) as err:
        raise ProfileError(f"{path}: not a readable CSV file ({err})") from None
    if not table[next(iter(columns))]:
        raise ProfileError(f"{path}: no data rows after the header {expected}")
    return table


def _array(values: list, dtype: type) -> np.ndarray:
    """Read-only arrays: a profile is shared by every job of its model, and nobody may edit it in place."""
    array: np.ndarray = np.asarray(values, dtype=dtype)
    array.flags.writeable = False
    return array


def _read_placements(path: Path) -> PlacementRows:
    t = _read_table(path, PLACEMENT_COLUMNS)
    return PlacementRows(
        placement=tuple(t["placement"]),
        num_nodes=_array([len(p) for p in t["placement"]], np.int64),
        num_replicas=_array([sum(map(int, p)) for p in t["placement"]], np.int64),
        local_bsz=_array(t["local_bsz"], np.int64),
        step_time=_array(t["step_time"], np.float64),
        sync_time=_array(t["sync_time"], np.float64),
    )


def _read_scalability(path: Path) -> ScalabilityRows:
    t = _read_table(path, SCALABILITY_COLUMNS)
    kinds = {"num_nodes": np.int64, "num_replicas": np.int64, "local_bsz": np.int64}
    return ScalabilityRows(**{name: _array(t[name], kinds.get(name, np.float64)) for name in SCALABILITY_COLUMNS})


def _read_validation(folder: Path) -> dict[int, ValidationRun]:
    runs: dict[int, ValidationRun] = {}
    for path in sorted(folder.glob("validation-*.csv")):
        match = _VALIDATION_NAME.fullmatch(path.name)
        if match is None:
            raise ProfileError(f"{path}: bad file name; expected validation-<M>.csv, M the total batch size")
        t = _read_table(path, VALIDATION_COLUMNS)
        kinds = {"iteration": np.int64}
        arrays = {name: _array(t[name], kinds.get(name, np.float64)) for name in VALIDATION_COLUMNS}
        runs[int(match.group(1))] = ValidationRun(batch_size=int(match.group(1)), **arrays)
    if not runs:
        raise ProfileError(f"{folder}: missing files validation-<M>.csv (one training run per total batch size M)")
    return dict(sorted(runs.items()))


def available_models(data_dir: Path | None = None, artifact: Artifact = DATASET) -> tuple[str, ...]:
    """Models with a profile folder (one holding `placements.csv` or `placements-<type>.csv`) in the data, sorted."""
    profiles = find_data_dir(data_dir, artifact).path / "profiles"
    return tuple(sorted({p.parent.name for p in profiles.glob("*/placements*.csv")}))


def profiled_gpu_types(folder: Path) -> tuple[str, ...]:
    """The GPU types with a `placements-<type>.csv` in a model's folder, sorted by name."""
    return tuple(sorted(p.name[len("placements-") : -len(".csv")] for p in folder.glob("placements-?*.csv")))


def _model_folder(model: str, root: Path) -> Path:
    """`profiles/<model>/`; a model is known if it is one of the Pollux artifact's `MODELS` or has a profile folder,
    and for a known model a missing file is reported as such, rather than as an unknown model."""
    folder = root / "profiles" / model
    known = sorted(set(MODELS) | set(available_models(root)))
    if model not in known:
        raise ProfileError(f"unknown model {model!r} (no folder {folder}); known models: {', '.join(known)}")
    return folder


def _typed(folder: Path, model: str, gpu_type: str | None, validation: dict[int, ValidationRun] | None) -> JobProfile:
    """The profile of one type; `validation` read here (after the step times) when not given."""
    suffix = "" if gpu_type is None else f"-{gpu_type}"
    if gpu_type is not None and not (folder / f"placements{suffix}.csv").is_file():
        types = ", ".join(profiled_gpu_types(folder)) or "none"
        raise ProfileError(
            f"{folder / f'placements{suffix}.csv'}: model {model!r} was not profiled on GPU type {gpu_type!r}; "
            f"profiled types: {types}"
        )
    placements = _read_placements(folder / f"placements{suffix}.csv")
    scalability = _read_scalability(folder / f"scalability{suffix}.csv")
    return JobProfile(
        model=model,
        placements=placements,
        scalability=scalability,
        validation=_read_validation(folder) if validation is None else validation,
        gpu_type=gpu_type,
    )


def load_profile(
    model: str, data_dir: Path | None = None, *, gpu_type: str | None = None, artifact: Artifact = DATASET
) -> JobProfile:
    """Read `profiles/<model>/` from the data folder (see `find_data_dir`) into a `JobProfile`: the step times of
    `placements-<gpu_type>.csv` and `scalability-<gpu_type>.csv`, or of the files without a suffix when `gpu_type`
    is None (the Pollux artifact's, measured on T4)."""
    root = find_data_dir(data_dir, artifact).path
    folder = _model_folder(model, root)
    return _typed(folder, model, gpu_type, None)


def load_typed_profiles(
    model: str, data_dir: Path | None = None, artifact: Artifact = DATASET
) -> dict[str, JobProfile]:
    """One `JobProfile` per GPU type `model` was profiled on (every `placements-<type>.csv`), sharing one read of
    the validation runs; by type name, sorted. Empty when the folder has no typed files (the Pollux artifact)."""
    root = find_data_dir(data_dir, artifact).path
    folder = _model_folder(model, root)
    validation = _read_validation(folder)
    return {gpu_type: _typed(folder, model, gpu_type, validation) for gpu_type in profiled_gpu_types(folder)}
