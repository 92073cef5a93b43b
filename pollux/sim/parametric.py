"""Job types described by numbers alone (docs/design.md, "Simulated jobs" and "Job models per GPU type").

Where no measured profile exists (a fresh clone without the data, or a user's own model), a job type is its batch
bounds, the throughput model's seven `ThroughputParams`, a short table of the gradient noise scale φ against the
fraction of training done, and its length in epochs of M0-steps. `catalog.toml` beside this file ships the six
artifact models, derived from their profiles by `scripts/make_catalog.py`; its header documents the format.

The top-level numbers describe the job on one GPU type (`gpu_type`, by default `aws`, the Pollux artifact's T4).
On other types the same job has its own `ThroughputParams` and per-GPU batch bounds (`[name.gpu.<type>]` tables):
what it learns per example does not depend on the GPU, how fast it computes, synchronizes and how much fits in
memory does. `load_catalog` reads the top-level type (what every caller read before there were types);
`load_typed_catalog` reads every type as a `TypedJobModel`.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from pollux.cluster import DEFAULT_GPU_TYPE
from pollux.errors import CatalogError
from pollux.goodput import GradientStats, ThroughputParams, compute_time, iteration_time
from pollux.goodput.throughput import PARAM_NAMES
from pollux.sim.typed import TypedJobModel

DEFAULT_CATALOG = Path(__file__).with_name("catalog.toml")


@dataclass(frozen=True)
class ParametricJobModel:
    """A `JobModel` from parameters. Step times follow the throughput model (Pollux §3.2); the gradient noise
    scale φ (examples) is interpolated linearly in the fraction of training done, at the middle of each epoch.

    Gradient statistics are returned as sqr = 1, var = φ/M0, which gives exactly φ's efficiency
    (φ + M0)/(φ + M) at every batch size M: unlike a measured profile, φ does not depend on the batch.
    """

    name: str
    init_batch_size: int  # M0, examples
    max_batch_size: int  # examples
    min_local_bsz: int  # examples per GPU
    max_local_bsz: int  # examples per GPU
    max_epochs: int
    progress_per_epoch: float  # M0-steps (examples per epoch / M0)
    throughput: ThroughputParams  # seconds
    noise_fraction: tuple[float, ...]  # fraction of training done, ascending in [0, 1]
    noise_scale: tuple[float, ...]  # φ at each fraction, examples
    description: str = ""
    _step_cache: dict[tuple[tuple[int, ...], int], tuple[float, float]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def step_time(self, placement: tuple[int, ...], local_bsz: int) -> tuple[float, float]:
        """(T_iter, T_iter − T_grad) in seconds: the sync part is what a step costs beyond its compute, so that
        accumulation (step − sync) repeats exactly the compute of one micro-batch."""
        key = (placement, local_bsz)
        cached = self._step_cache.get(key)
        if cached is None:
            num_nodes = sum(1 for g in placement if g)
            num_replicas = sum(placement)
            if num_replicas < 1:
                raise ValueError(f"{self.name}: placement {placement!r} has no GPUs")
            step_s = float(iteration_time(self.throughput, num_nodes, num_replicas, local_bsz))
            cached = step_s, step_s - float(compute_time(self.throughput, local_bsz))
            self._step_cache[key] = cached
        return cached

    def grad_stats(self, batch_size: float, epoch: int) -> GradientStats:
        """Statistics of φ at the middle of `epoch` (0-based); the same at every batch size."""
        fraction = (epoch + 0.5) / self.max_epochs
        phi = float(np.interp(fraction, self.noise_fraction, self.noise_scale))
        return GradientStats(sqr=1.0, var=phi / self.init_batch_size)

    def epoch_progress(self, epoch: int) -> float:
        """Progress (M0-steps) after `epoch` epochs: every epoch is `progress_per_epoch` long."""
        if not 0 <= epoch <= self.max_epochs:
            raise ValueError(f"{self.name}: epoch {epoch} out of range; expected 0..{self.max_epochs}")
        return epoch * self.progress_per_epoch


# ---- the catalog file ---------------------------------------------------------------------------------------

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_COUNTS = ("init_batch_size", "max_batch_size", "min_local_bsz", "max_local_bsz", "max_epochs")
_FIELDS = (*_COUNTS, "progress_per_epoch", "throughput", "noise_scale", "description", "gpu_type", "gpu")
_OPTIONAL = ("description", "gpu_type", "gpu")
_GPU_FIELDS = ("throughput", "min_local_bsz", "max_local_bsz")  # what differs on another GPU type
_GPU_OPTIONAL = ("min_local_bsz", "max_local_bsz")  # absent: the top-level bounds


class _Entry:
    """Reads one job type's table; every complaint names the file, the type and the field."""

    def __init__(self, path: Path, name: str, table: Any) -> None:
        self.path, self.name = path, name
        if not _NAME.fullmatch(name):
            self.fail("", f"bad type name {name!r}; expected letters, digits, '_', '.', '-' (e.g. 'my-bert')")
        if not isinstance(table, dict):
            self.fail("", f"expected a table [{name}] of fields, got {type(table).__name__}")
        self.table = table

    def fail(self, field_name: str, problem: str) -> None:
        where = f"[{self.name}] {field_name}: " if field_name else f"[{self.name}]: "
        raise CatalogError(f"{self.path}: {where}{problem}")

    def keys(self, table: dict, accepted: tuple[str, ...], prefix: str = "", optional: tuple[str, ...] = ()) -> None:
        for key in table:
            if key not in accepted:
                self.fail(f"{prefix}{key}", f"unknown field; accepted fields: {', '.join(accepted)}")
        for key in accepted:
            if key not in table and key not in optional:
                self.fail(f"{prefix}{key}", "missing field")

    def number(self, value: Any, field_name: str, minimum: float, strict: bool = False) -> float:
        """A finite int or float >= minimum (> minimum when strict)."""
        bound = f"{'>' if strict else '>='} {minimum:g}"
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            self.fail(field_name, f"{value!r} is not a finite number; expected a number {bound}")
        if value < minimum or (strict and value == minimum):
            self.fail(field_name, f"{value!r} out of range; expected a number {bound}")
        return float(value)

    def count(self, field_name: str, table: dict | None = None, prefix: str = "") -> int:
        value = (self.table if table is None else table)[field_name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            self.fail(f"{prefix}{field_name}", f"{value!r} is not a positive integer; expected an integer >= 1")
        return value

    def throughput(self, table: Any = None, prefix: str = "") -> ThroughputParams:
        table = self.table["throughput"] if table is None else table
        if not isinstance(table, dict):
            self.fail(
                f"{prefix}throughput",
                f"expected a table [{self.name}.{prefix}throughput] with {', '.join(PARAM_NAMES)}",
            )
        self.keys(table, PARAM_NAMES, prefix=f"{prefix}throughput.")
        values = [self.number(table[k], f"{prefix}throughput.{k}", 0.0) for k in PARAM_NAMES]
        self.number(table["gamma"], f"{prefix}throughput.gamma", 1.0)
        return ThroughputParams(*values)

    def bounds(self, min_local_bsz: int, max_local_bsz: int, max_batch_size: int, prefix: str = "") -> None:
        if min_local_bsz > max_local_bsz:
            self.fail(f"{prefix}min_local_bsz", f"{min_local_bsz} > max_local_bsz = {max_local_bsz}")
        if min_local_bsz > max_batch_size:
            self.fail(f"{prefix}min_local_bsz", f"{min_local_bsz} > max_batch_size = {max_batch_size}")

    def gpu_type(self) -> str:
        value = self.table.get("gpu_type", DEFAULT_GPU_TYPE)
        if not isinstance(value, str) or not _NAME.fullmatch(value):
            self.fail("gpu_type", f"{value!r} is not a GPU type name; expected letters, digits, '_', '.', '-'")
        return value

    def typed(self, base: ParametricJobModel) -> TypedJobModel:
        """`base` on its own type (`gpu_type`), and on every type of the `[name.gpu.<type>]` tables."""
        base_type = self.gpu_type()
        tables = self.table.get("gpu", {})
        if not isinstance(tables, dict):
            self.fail("gpu", f"expected tables [{self.name}.gpu.<type>], one per other GPU type")
        by_type = {base_type: base}
        for gpu_type, table in tables.items():
            prefix = f"gpu.{gpu_type}."
            if not _NAME.fullmatch(gpu_type) or not isinstance(table, dict):
                self.fail(f"gpu.{gpu_type}", f"expected a table [{self.name}.gpu.<type>], <type> a GPU type name")
            if gpu_type == base_type:
                self.fail(f"gpu.{gpu_type}", f"is the top-level type (gpu_type = {base_type!r}): describe it once")
            self.keys(table, _GPU_FIELDS, prefix=prefix, optional=_GPU_OPTIONAL)
            low, high = (self.count(k, table, prefix) if k in table else getattr(base, k) for k in _GPU_OPTIONAL)
            self.bounds(low, high, base.max_batch_size, prefix)
            throughput = self.throughput(table["throughput"], prefix)
            by_type[gpu_type] = replace(base, throughput=throughput, min_local_bsz=low, max_local_bsz=high)
        return TypedJobModel(self.name, by_type)

    def noise(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        rows = self.table["noise_scale"]
        expected = "a list of [fraction of training in 0..1 (ascending), noise scale φ in examples] pairs"
        if not isinstance(rows, list) or not rows:
            self.fail("noise_scale", f"expected {expected}")
        fractions: list[float] = []
        scales: list[float] = []
        for i, row in enumerate(rows):
            if not isinstance(row, list) or len(row) != 2:
                self.fail(f"noise_scale[{i}]", f"{row!r} is not a pair; expected {expected}")
            fraction = self.number(row[0], f"noise_scale[{i}] fraction", 0.0)
            if fraction > 1 or (fractions and fraction <= fractions[-1]):
                self.fail(f"noise_scale[{i}] fraction", f"{row[0]!r} out of order; expected {expected}")
            fractions.append(fraction)
            scales.append(self.number(row[1], f"noise_scale[{i}] φ", 0.0))
        return tuple(fractions), tuple(scales)

    def model(self) -> ParametricJobModel:
        self.keys(self.table, _FIELDS, optional=_OPTIONAL)
        counts = {name: self.count(name) for name in _COUNTS}
        self.bounds(counts["min_local_bsz"], counts["max_local_bsz"], counts["max_batch_size"])
        if counts["init_batch_size"] > counts["max_batch_size"]:
            self.fail("init_batch_size", f"{counts['init_batch_size']} > max_batch_size = {counts['max_batch_size']}")
        description = self.table.get("description", "")
        if not isinstance(description, str):
            self.fail("description", f"{description!r} is not a string")
        fractions, scales = self.noise()
        return ParametricJobModel(
            name=self.name,
            progress_per_epoch=self.number(self.table["progress_per_epoch"], "progress_per_epoch", 0.0, strict=True),
            throughput=self.throughput(),
            noise_fraction=fractions,
            noise_scale=scales,
            description=description,
            **counts,
        )


def _entries(path: Path | str | None) -> list[_Entry]:
    path = Path(path) if path is not None else DEFAULT_CATALOG
    try:
        with path.open("rb") as f:
            document = tomllib.load(f)
    except FileNotFoundError:
        raise CatalogError(f"{path}: no such catalog file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise CatalogError(f"{path}: not valid TOML ({err})") from None
    if not document:
        raise CatalogError(f"{path}: no job types; expected one [name] table per type (see {DEFAULT_CATALOG})")
    return [_Entry(path, name, table) for name, table in document.items()]


def load_catalog(path: Path | str | None = None) -> dict[str, ParametricJobModel]:
    """Job types from a catalog file (default: the shipped `catalog.toml`), by name, in file order; each on its
    top-level GPU type (its `[name.gpu.<type>]` tables are checked, and read by `load_typed_catalog`)."""
    models = {}
    for entry in _entries(path):
        models[entry.name] = entry.model()
        entry.typed(models[entry.name])
    return models


def load_typed_catalog(path: Path | str | None = None) -> dict[str, TypedJobModel]:
    """Job types from a catalog file (default: the shipped `catalog.toml`), by name, in file order, each on every
    GPU type it describes: its top-level `gpu_type` and every `[name.gpu.<type>]`."""
    return {entry.name: entry.typed(entry.model()) for entry in _entries(path)}
