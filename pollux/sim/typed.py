"""Job models per GPU type: one application's `JobModel`s, one for each GPU type it can run on (docs/design.md,
"Job models per GPU type").

On a cluster of several GPU types a job runs on one type at a time; its step times and memory limit (largest per-GPU
batch) depend on the type, while what it learns per example (M0, max batch, gradient statistics, epochs) does not.
`TypedJobModel` holds the per-type models and says which types exist; `load_typed_models` builds them from either
artifact:

- `pollux-osdi21`: every model on the one type `aws` (T4), exactly the models of `load_measured_models`;
- `sia-sosp23`: every model on each type Sia profiled it on, from `placements-<type>.csv` and
  `scalability-<type>.csv`, with Sia's per-model settings (`SIA_SETTINGS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from pollux.cluster import DEFAULT_GPU_TYPE
from pollux.data.locate import DATASET, SIA_DATASET, check_artifact
from pollux.data.profiles import load_typed_profiles
from pollux.errors import SpecError
from pollux.sim.jobmodel import JobModel
from pollux.sim.measured import MeasuredJobModel, load_measured_models

Source = Literal["pollux-osdi21", "sia-sosp23"]


@dataclass(frozen=True)
class TypedJobModel:
    """One application's job models, one per GPU type it was profiled on; they share M0, max batch, statistics."""

    name: str
    by_type: Mapping[str, JobModel]  # pollux.sim.jobmodel.JobModel, one per type
    progress_slowdown: float = 1.0  # Sia's calibration: simulated progress divided by this
    restore_delay_s: float | None = None  # per-model checkpoint-restore delay; None: the simulator's --restart-delay
    # Whether a move to other nodes of the same type, same GPUs per node, restarts the job: the Pollux artifact's
    # simulator restarts on any change of GPUs; Sia's only when the job's GPUs per node (or its type) change.
    restarts_on_move: bool = True

    def __post_init__(self) -> None:
        if not self.by_type:
            raise SpecError(f"model {self.name!r}: no GPU type; expected a job model for at least one type")
        if not self.progress_slowdown > 0:
            raise SpecError(f"model {self.name!r}: progress_slowdown = {self.progress_slowdown}; expected > 0")
        if self.restore_delay_s is not None and not self.restore_delay_s >= 0:
            raise SpecError(f"model {self.name!r}: restore_delay_s = {self.restore_delay_s}; expected >= 0 or None")
        first_type, first = next(iter(self.by_type.items()))
        shared = ("init_batch_size", "max_batch_size", "max_epochs")
        for gpu_type, model in self.by_type.items():
            for attribute in shared:
                if getattr(model, attribute) != getattr(first, attribute):
                    raise SpecError(
                        f"model {self.name!r}: {attribute} = {getattr(model, attribute)} on {gpu_type!r} but "
                        f"{getattr(first, attribute)} on {first_type!r}; the types of one model share {shared}"
                    )
        object.__setattr__(self, "by_type", MappingProxyType(dict(self.by_type)))

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """The types this model can run on, in the order given."""
        return tuple(self.by_type)

    def on(self, gpu_type: str) -> JobModel:
        """The model on `gpu_type`; a `SpecError` naming the model and its profiled types when it has none there."""
        model = self.by_type.get(gpu_type)
        if model is None:
            raise SpecError(
                f"model {self.name!r} has no job model for GPU type {gpu_type!r}; "
                f"profiled types: {', '.join(self.gpu_types)}"
            )
        return model

    # What every type shares, read from any of them.

    @property
    def init_batch_size(self) -> int:
        return next(iter(self.by_type.values())).init_batch_size

    @property
    def max_batch_size(self) -> int:
        return next(iter(self.by_type.values())).max_batch_size

    @property
    def max_epochs(self) -> int:
        return next(iter(self.by_type.values())).max_epochs

    @property
    def local_bsz_bounds_by_type(self) -> dict[str, tuple[int, int]]:
        """(min, max) per-GPU batch on each type: the memory limit differs by type."""
        return {t: (m.min_local_bsz, m.max_local_bsz) for t, m in self.by_type.items()}

    def gpus_per_replica(self, gpu_type: str) -> int:
        """GPUs of one data-parallel replica on `gpu_type`: 1, save for a pipeline-parallel model
        (`pollux.sim.pipeline`), whose replica is a pipeline of k GPUs on one node."""
        return int(getattr(self.on(gpu_type), "gpus_per_replica", 1))

    @property
    def pipelined(self) -> bool:
        """Whether a replica is more than one GPU on some type."""
        return any(self.gpus_per_replica(t) > 1 for t in self.by_type)


# ---- the Sia artifact's per-model settings ---------------------------------------------------------------------


@dataclass(frozen=True)
class SiaModelSettings:
    """What Sia's simulator sets per model beyond its profiles (docs/design.md, "Job models per GPU type")."""

    max_epochs: int  # as the Pollux artifact's
    progress_slowdown: float  # simulated progress divided by this, calibrated on Sia's physical runs
    restore_delay_s: float  # checkpoint-restore delay on every start, resize or move
    max_local_bsz: Mapping[str, int] = field(default_factory=dict)  # per type, where Sia overrides the profile's


# docs/design.md, "Job models per GPU type": epochs as Pollux's; slowdowns and restore delays as Sia's simulator;
# deepspeech2 on rtx capped at 57 per GPU by Sia's `applications.py` (its profile goes to 80).
SIA_SETTINGS: dict[str, SiaModelSettings] = {
    # model:                     max_epochs, progress_slowdown, restore_delay_s, per-type max_local_bsz
    "bert": SiaModelSettings(2, 1.2, 120),
    "cifar10": SiaModelSettings(100, 1.8, 50),
    "deepspeech2": SiaModelSettings(80, 1.2, 25, {"rtx": 57}),
    "imagenet": SiaModelSettings(90, 1.2, 250),
    "ncf": SiaModelSettings(10, 1.5, 15),
    "yolov3": SiaModelSettings(50, 1.2, 80),
}
# Sia's profiles hold one more model, gpt_pmp (on rtx and dgx-ext only): a pipeline-parallel job whose files give one
# pipeline stage's time per micro-batch, which Sia's simulator turns into a step time by a formula of its own. Read
# as a data-parallel profile it would answer with wrong step times; `pollux.sim.pipeline` reads it, and
# `load_typed_models(..., pipelines=True)` adds it.


def load_sia_models(data_dir: Path | None = None) -> dict[str, TypedJobModel]:
    """Sia's six data-parallel models, each on every GPU type it was profiled on (`dgx` and `dgx-ext` alike: which
    a cluster has is the cluster's business), with `SIA_SETTINGS`. Per type, the per-GPU batch bounds are the
    smallest and largest profiled there (its memory limit), save Sia's own overrides."""
    models = {}
    for name, settings in SIA_SETTINGS.items():
        profiles = load_typed_profiles(name, data_dir, SIA_DATASET)
        by_type = {
            gpu_type: MeasuredJobModel.from_profile(
                profile, settings.max_epochs, max_local_bsz=settings.max_local_bsz.get(gpu_type)
            )
            for gpu_type, profile in profiles.items()
        }
        models[name] = TypedJobModel(
            name, by_type, settings.progress_slowdown, settings.restore_delay_s, restarts_on_move=False
        )
    return models


def load_pipeline_models(data_dir: Path | None = None) -> dict[str, TypedJobModel]:
    """Sia's pipeline-parallel models (`pollux.sim.pipeline.SIA_PIPELINES`: gpt_pmp), on the types it profiled."""
    from pollux.sim.pipeline import SIA_PIPELINES, load_pipeline_profiles

    models = {}
    for name, settings in SIA_PIPELINES.items():
        by_type = load_pipeline_profiles(name, data_dir)
        models[name] = TypedJobModel(
            name, by_type, settings.progress_slowdown, settings.restore_delay_s, restarts_on_move=False
        )
    return models


def load_typed_models(
    source: Source, data_dir: Path | None = None, pipelines: bool = False
) -> dict[str, TypedJobModel]:
    """Every measured model of `source`, per GPU type. `pollux-osdi21`: the `load_measured_models` objects
    themselves, on `aws` (T4), with no slowdown and the simulator's restart delay. `sia-sosp23`: `load_sia_models`,
    and with `pipelines` its pipeline-parallel models too (`load_pipeline_models`). `data_dir` is that artifact's
    folder (default: found as `find_data_dir` does)."""
    if check_artifact(source) == DATASET:
        return {name: TypedJobModel(name, {DEFAULT_GPU_TYPE: m}) for name, m in load_measured_models(data_dir).items()}
    if pipelines:
        return load_sia_models(data_dir) | load_pipeline_models(data_dir)
    return load_sia_models(data_dir)
