"""Job models from the artifact's measured profiles, reproducing its simulator's numbers (docs/design.md,
"Simulated jobs").

Fidelity with the published completion times depends on answering exactly as the artifact's `applications.py`:

- step time at a placement (zeros dropped, rotated to its lexicographically smallest form): a measured placement
  interpolates linearly over `local_bsz` among its own rows; any other placement interpolates linearly (Delaunay,
  `scipy.interpolate.LinearNDInterpolator`) over (num_nodes capped at 16, num_replicas, local_bsz) across the
  placements rows averaged by those three keys, followed by the `scalability.csv` rows, in that order;
- gradient statistics: the validation runs' `grad_sqr`, `grad_var` of the epoch, linearly interpolated in the total
  batch size between the two measured batch sizes around it;
- epoch boundaries: the minimum over validation runs of their progress after that many epochs.

Where the artifact fails (a `local_bsz` outside a measured placement's rows raises in `interp1d`; a point outside the
convex hull gives NaN and trips an assert), we answer instead of crashing, so those configurations never occurred in
its published runs: a measured placement outside its rows falls back to the interpolation over counts, and a point
outside the hull falls back to the throughput model fitted to the whole profile (`pollux.calibration`), as does every
unmeasured placement of a profile whose points span no volume (Sia's `quad` type, measured on one node only: no
triangulation exists). A batch size outside the measured ones (the artifact asserts) uses the nearest measured run.
Configurations within a model's bounds (per-GPU batch in [min_local_bsz, max_local_bsz], K·m ≤ max_batch_size) never
need a fallback.
"""

from __future__ import annotations

import bisect
from pathlib import Path

import numpy as np
from scipy.interpolate import LinearNDInterpolator
from scipy.spatial import QhullError

from pollux.calibration import profile_samples
from pollux.data.profiles import MODELS, JobProfile, load_profile
from pollux.errors import SpecError
from pollux.goodput import GradientStats, ThroughputParams, compute_time, fit_throughput, iteration_time
from pollux.sim.jobmodel import normalize_placement

# Per-model settings of the artifact's simulator; everything else comes from the profile itself.
ARTIFACT_SETTINGS: dict[str, dict[str, int]] = {
    "bert": {"max_epochs": 2},
    "cifar10": {"max_epochs": 100},
    "ncf": {"max_epochs": 10},
    "imagenet": {"max_epochs": 90},
    "deepspeech2": {"max_epochs": 80},
    "yolov3": {"max_epochs": 50, "max_local_bsz": 8},
}

MAX_INTERPOLATED_NODES = 16  # the profiles' cluster had 16 nodes; the artifact caps num_nodes there


class _PlacementRows:
    """One measured placement's rows, sorted by per-GPU batch, as plain arrays for `np.interp`."""

    __slots__ = ("local_bsz", "step_time", "sync_time")

    def __init__(self, local_bsz: np.ndarray, step_time: np.ndarray, sync_time: np.ndarray) -> None:
        order = np.argsort(local_bsz, kind="stable")
        self.local_bsz = local_bsz[order].astype(np.float64)
        self.step_time = step_time[order]
        self.sync_time = sync_time[order]

    def covers(self, local_bsz: float) -> bool:
        return self.local_bsz[0] <= local_bsz <= self.local_bsz[-1]

    def at(self, local_bsz: float) -> tuple[float, float]:
        """Linear in `local_bsz`; a measured `local_bsz` gives its row's values exactly (the artifact's `interp1d`
        recomputes a measured point from its left neighbour, 1 ulp off for a few rows)."""
        x = float(local_bsz)
        return float(np.interp(x, self.local_bsz, self.step_time)), float(np.interp(x, self.local_bsz, self.sync_time))


def _count_points(profile: JobProfile) -> tuple[np.ndarray, np.ndarray]:
    """The artifact's points for unmeasured placements: placements rows averaged by (num_nodes, num_replicas,
    local_bsz), in ascending key order, then the scalability rows in file order. Returns (points, values).

    Group sums run in row order, as in the pandas the artifact pinned (1.1); pandas >= 1.3 sums with Kahan
    compensation, which moves a few means by an ulp.
    """
    p, s = profile.placements, profile.scalability
    keys = np.stack([p.num_nodes, p.num_replicas, p.local_bsz], axis=1)
    unique, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    counts = np.bincount(inverse)
    means = np.stack(
        [np.bincount(inverse, weights=p.step_time) / counts, np.bincount(inverse, weights=p.sync_time) / counts],
        axis=1,
    )
    points = np.concatenate([unique, np.stack([s.num_nodes, s.num_replicas, s.local_bsz], axis=1)]).astype(np.float64)
    values = np.concatenate([means, np.stack([s.step_time, s.sync_time], axis=1)])
    return points, values


class MeasuredJobModel:
    """A `JobModel` answering from one model's measured profile, as the artifact's simulator does.

    Build it with `from_profile`. `step_time` and `grad_stats` are cached: the simulator asks every round for every
    job, mostly the same few configurations.
    """

    def __init__(
        self,
        profile: JobProfile,
        *,
        init_batch_size: int,
        max_batch_size: int,
        min_local_bsz: int,
        max_local_bsz: int,
        max_epochs: int,
    ) -> None:
        self.name = profile.model
        self.profile = profile
        self.init_batch_size = init_batch_size
        self.max_batch_size = max_batch_size
        self.min_local_bsz = min_local_bsz
        self.max_local_bsz = max_local_bsz
        self.max_epochs = max_epochs

        rows = profile.placements
        by_placement: dict[tuple[int, ...], list[int]] = {}
        for i, text in enumerate(rows.placement):
            by_placement.setdefault(normalize_placement(tuple(map(int, text))), []).append(i)
        self._placements = {
            key: _PlacementRows(rows.local_bsz[idx], rows.step_time[idx], rows.sync_time[idx])
            for key, idx in by_placement.items()
        }
        self._counts: LinearNDInterpolator | None = None  # built on first use: a Delaunay triangulation
        self._flat = False  # the count points span no volume: no triangulation, every unmeasured point extrapolates
        self._fitted: ThroughputParams | None = None  # fitted on first use, only outside the measured hull
        self._step_cache: dict[tuple[tuple[int, ...], int], tuple[float, float]] = {}
        self._normalized_cache: dict[tuple[tuple[int, ...], int], tuple[float, float]] = {}

        runs = list(profile.validation.values())  # ascending batch size
        num_rows = min(len(run.progress) for run in runs)
        self._batch_sizes = [run.batch_size for run in runs]
        self._grad_sqr = [run.grad_sqr[:num_rows].tolist() for run in runs]
        self._grad_var = [run.grad_var[:num_rows].tolist() for run in runs]
        self._grad_cache: dict[tuple[float, int], GradientStats] = {}
        finished = np.min([run.progress[:num_rows] for run in runs], axis=0)
        self._epoch_progress = [0.0, *finished.tolist()]

    @classmethod
    def from_profile(
        cls,
        profile: JobProfile,
        max_epochs: int | None = None,
        *,
        init_batch_size: int | None = None,
        max_batch_size: int | None = None,
        min_local_bsz: int | None = None,
        max_local_bsz: int | None = None,
    ) -> MeasuredJobModel:
        """Defaults as the artifact: M0 and max batch = smallest and largest validated batch; per-GPU bounds = the
        smallest and largest `local_bsz` in `placements.csv`; epochs = as many as every validation run has."""
        epochs_measured = min(len(run.progress) for run in profile.validation.values())
        model = cls(
            profile,
            init_batch_size=init_batch_size or profile.init_batch_size,
            max_batch_size=max_batch_size or profile.max_batch_size,
            min_local_bsz=min_local_bsz or int(profile.placements.local_bsz.min()),
            max_local_bsz=max_local_bsz or int(profile.placements.local_bsz.max()),
            max_epochs=max_epochs or epochs_measured,
        )
        if model.max_epochs > epochs_measured:
            raise SpecError(
                f"model {profile.model!r}: max_epochs = {model.max_epochs}, but its validation runs measure only "
                f"{epochs_measured} epochs; expected 1..{epochs_measured}"
            )
        if not 1 <= model.min_local_bsz <= model.max_local_bsz or model.min_local_bsz > model.max_batch_size:
            raise SpecError(
                f"model {profile.model!r}: need 1 <= min_local_bsz ({model.min_local_bsz}) <= max_local_bsz "
                f"({model.max_local_bsz}) and min_local_bsz <= max_batch_size ({model.max_batch_size})"
            )
        return model

    # ---- step time ------------------------------------------------------------------------------------------

    def step_time(self, placement: tuple[int, ...], local_bsz: int) -> tuple[float, float]:
        """(step_time_s, sync_time_s) of one step without accumulation; see the module docstring."""
        key = (placement, local_bsz)
        cached = self._step_cache.get(key)
        if cached is None:
            normalized = (normalize_placement(placement), local_bsz)
            cached = self._normalized_cache.get(normalized)
            if cached is None:
                cached = self._normalized_cache[normalized] = self._interpolate(*normalized)
            self._step_cache[key] = cached
        return cached

    def _interpolate(self, placement: tuple[int, ...], local_bsz: int) -> tuple[float, float]:
        rows = self._placements.get(placement)
        if rows is not None and rows.covers(local_bsz):
            return rows.at(local_bsz)
        num_nodes = min(len(placement), MAX_INTERPOLATED_NODES)
        num_replicas = sum(placement)
        if self._counts is None and not self._flat:
            # One interpolator answers like the artifact's fresh one per call: each call starts its simplex walk at
            # simplex 0, and that matters, because on the grid's cospherical points the triangulation is not
            # conforming and the walk decides which of two tetrahedra (and values) a point on their plane gets.
            try:
                self._counts = LinearNDInterpolator(*_count_points(self.profile))
            except QhullError:
                self._flat = True
        if self._counts is None:
            return self._extrapolate(len(placement), num_replicas, local_bsz)
        step_s, sync_s = self._counts(np.array([[num_nodes, num_replicas, local_bsz]], dtype=np.float64))[0]
        if np.isfinite(step_s) and np.isfinite(sync_s):
            return float(step_s), float(sync_s)
        return self._extrapolate(len(placement), num_replicas, local_bsz)

    def _extrapolate(self, num_nodes: int, num_replicas: int, local_bsz: int) -> tuple[float, float]:
        """Outside everything measured: the throughput model fitted to the profile; sync = T_iter − T_grad, so that
        accumulation (step − sync) repeats exactly the compute."""
        if self._fitted is None:
            self._fitted = fit_throughput(profile_samples(self.profile))
        step_s = float(iteration_time(self._fitted, num_nodes, num_replicas, local_bsz))
        return step_s, step_s - float(compute_time(self._fitted, local_bsz))

    # ---- statistics and progress ----------------------------------------------------------------------------

    def grad_stats(self, batch_size: float, epoch: int) -> GradientStats:
        """(sqr, var) of `epoch`, linear in the batch size between the two validation runs around it."""
        key = (batch_size, epoch)
        cached = self._grad_cache.get(key)
        if cached is None:
            cached = self._grad_cache[key] = self._interpolate_stats(batch_size, epoch)
        return cached

    def _interpolate_stats(self, batch_size: float, epoch: int) -> GradientStats:
        if not 0 <= epoch < len(self._epoch_progress) - 1:
            raise ValueError(f"{self.name}: epoch {epoch} not measured; expected 0..{len(self._epoch_progress) - 2}")
        sizes = self._batch_sizes
        batch = min(max(batch_size, sizes[0]), sizes[-1])
        upper = bisect.bisect_left(sizes, batch)
        lower = upper if sizes[upper] == batch else upper - 1
        lo_bsz, hi_bsz = sizes[lower], sizes[upper]
        lo_sqr, hi_sqr = self._grad_sqr[lower][epoch], self._grad_sqr[upper][epoch]
        lo_var, hi_var = self._grad_var[lower][epoch], self._grad_var[upper][epoch]
        if lower == upper:
            return GradientStats(sqr=lo_sqr, var=lo_var)
        # The artifact's own arithmetic, so the numbers agree to the last bit.
        span = hi_bsz - lo_bsz
        sqr = ((batch - lo_bsz) * hi_sqr + (hi_bsz - batch) * lo_sqr) / span
        var = ((batch - lo_bsz) * hi_var + (hi_bsz - batch) * lo_var) / span
        return GradientStats(sqr=sqr, var=var)

    def epoch_progress(self, epoch: int) -> float:
        """Progress (M0-steps) after `epoch` epochs: the least any validation run needed."""
        if not 0 <= epoch < len(self._epoch_progress):
            raise ValueError(f"{self.name}: epoch {epoch} not measured; expected 0..{len(self._epoch_progress) - 1}")
        return self._epoch_progress[epoch]

    def __repr__(self) -> str:
        return (
            f"MeasuredJobModel({self.name!r}, M0={self.init_batch_size}, max_batch={self.max_batch_size}, "
            f"local_bsz={self.min_local_bsz}..{self.max_local_bsz}, max_epochs={self.max_epochs})"
        )


def load_measured_models(data_dir: Path | None = None) -> dict[str, MeasuredJobModel]:
    """The artifact's six models with its per-model settings, from the data folder (see `find_data_dir`)."""
    return {
        name: MeasuredJobModel.from_profile(load_profile(name, data_dir), **ARTIFACT_SETTINGS[name]) for name in MODELS
    }
