"""Statistical efficiency from the gradient noise scale (Pollux §3.1; McCandlish et al. 2018).

`GradientStats` holds the two moments the agent measures at the initial batch size M0: `sqr` = |g|^2 (squared norm
of the true gradient) and `var` = tr(Σ)/M0 (variance of an M0-batch gradient). The noise scale is
φ = M0·var/sqr, and training at a total batch M instead of M0 makes progress

    gain(M)       = (var + sqr) / (var/(M/M0) + sqr)       (M0-steps per step; the AdaScale gain ratio)
    EFFICIENCY(M) = gain(M) / (M/M0) = (φ + M0) / (φ + M)  (1 at M = M0, falls as M grows)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from numpy.typing import ArrayLike

Batch = TypeVar("Batch", float, np.ndarray)


@dataclass(frozen=True)
class GradientStats:
    """Gradient moments measured at batch size M0: `sqr` = |g|², `var` = tr(Σ)/M0. Both ≥ 0."""

    sqr: float
    var: float

    def __post_init__(self) -> None:
        if not (np.isfinite(self.sqr) and np.isfinite(self.var)) or self.sqr < 0 or self.var < 0:
            raise ValueError(f"GradientStats needs finite sqr >= 0 and var >= 0, got sqr={self.sqr}, var={self.var}")


def noise_scale(stats: GradientStats, init_batch_size: float) -> float:
    """φ = M0·var/sqr in examples. Infinite when the true gradient vanishes; 0 when nothing is measured yet
    (which makes every larger batch look maximally inefficient: the conservative choice)."""
    if stats.sqr > 0:
        return init_batch_size * stats.var / stats.sqr
    return float("inf") if stats.var > 0 else 0.0


def adascale_gain(stats: GradientStats, init_batch_size: float, batch_size: Batch) -> Batch:
    """AdaScale's gain ratio r(M) ∈ [1, M/M0]: M0-steps of progress one step at batch M is worth.

    Also the learning-rate multiplier of the AdaScale scaling rule, and the simulator's progress per step. The one
    definition for scalars and arrays alike: a float batch gives a float (the simulator asks once per job and
    step, where numpy's per-call cost would dominate), an array gives an array.
    """
    scale = batch_size / init_batch_size
    num = stats.var + stats.sqr
    if num <= 0:  # nothing measured: no gain beyond one M0-step
        return scale * 0.0 + 1.0
    return num / (stats.var / scale + stats.sqr)


def efficiency(stats: GradientStats, init_batch_size: float, batch_size: ArrayLike) -> np.ndarray:
    """EFFICIENCY(M) = (φ + M0) / (φ + M), vectorized over `batch_size`."""
    batch = np.asarray(batch_size, dtype=np.float64)
    return adascale_gain(stats, init_batch_size, batch) / (batch / init_batch_size)
