"""One application's job models per GPU type (docs/design.md, "Heterogeneous clusters")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pollux.errors import SpecError
from pollux.sim.jobmodel import JobModel


@dataclass(frozen=True)
class TypedJobModel:
    """One application's job models, one per GPU type it was profiled on; they share M0, max batch, statistics."""

    name: str
    by_type: Mapping[str, JobModel]
    progress_slowdown: float = 1.0  # Sia's calibration: simulated progress divided by this
    restore_delay_s: float | None = None  # per-model checkpoint-restore delay; None: the simulator's --restart-delay

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(self.by_type)

    def on(self, gpu_type: str) -> JobModel:
        try:
            return self.by_type[gpu_type]
        except KeyError:
            raise SpecError(
                f"model {self.name!r} has no profile for GPU type {gpu_type!r}; profiled: {', '.join(self.by_type)}"
            ) from None
