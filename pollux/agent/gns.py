"""Gradient noise scale from gradients at two batch sizes (McCandlish et al. 2018, App. A.1; Pollux §3.1). Torch-free.

A gradient averaged over B examples has E|G_B|² = |g|² + tr(Σ)/B, with g the true gradient and Σ the per-example
gradient covariance. Measuring |G|² at a small batch B_s and a big batch B_b > B_s and solving the two equations
gives unbiased estimates of both unknowns:

    |g|²  = (B_b·|G_b|² − B_s·|G_s|²) / (B_b − B_s)
    tr(Σ) = (|G_s|² − |G_b|²) / (1/B_s − 1/B_b)

Single-step estimates are very noisy (|g|² is a difference of two large numbers), so each is smoothed by a
bias-corrected exponential moving average, and the noise scale is the ratio of the averages, not an average of
ratios. The averages convert to `pollux.goodput.GradientStats` at the initial batch size M0: sqr = |g|²,
var = tr(Σ)/M0, so that noise_scale(stats, M0) = M0·var/sqr = tr(Σ)/|g|² = B_simple of McCandlish et al.

Batches are drawn without replacement from the N examples of an epoch, so a batch's gradient has variance
tr(Σ)/B·(N−B)/(N−1), not tr(Σ)/B (Σ the covariance of the N per-example gradients). Solving the same two equations
with that variance gives

    |g|²  = (the |g|² above) + (the tr(Σ) above)/N
    tr(Σ) = (the tr(Σ) above)·(N−1)/N

Without the correction |g|² comes out low by tr(Σ)/N = |g|²·φ/N: harmless while φ ≪ N, but a small dataset trained
long goes past φ = N (the digits example: N = 1,500 and φ ≈ 15,000 late on, where the uncorrected |g|² is negative on
average and φ reads ∞).
"""

from __future__ import annotations

import math
from typing import Any

from pollux.goodput import GradientStats


def two_batch_estimates(
    small_sqr: float, small_bsz: float, big_sqr: float, big_bsz: float, num_examples: float = math.inf
) -> tuple[float, float]:
    """Unbiased (|g|², tr(Σ)) from the mean squared norm of gradients at batch `small_bsz` and at `big_bsz`, both
    drawn without replacement from `num_examples` (infinite: independent draws)."""
    if not 0 < small_bsz < big_bsz:
        raise ValueError(f"need 0 < small_bsz < big_bsz, got {small_bsz} and {big_bsz}")
    if not num_examples > 0:
        raise ValueError(f"need num_examples > 0, got {num_examples}")
    sqr = (big_bsz * big_sqr - small_bsz * small_sqr) / (big_bsz - small_bsz)
    trace = (small_sqr - big_sqr) / (1.0 / small_bsz - 1.0 / big_bsz)
    return sqr + trace / num_examples, trace - trace / num_examples


class NoiseScaleEstimator:
    """EMA-smoothed |g|² and tr(Σ). Each update's decay is `smoothing ** (big_bsz / M0)`, so the memory is the same
    number of examples whatever the batch size (a step at 4·M0 counts like four steps at M0)."""

    def __init__(self, smoothing: float = 0.999) -> None:
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
        self.smoothing = smoothing
        self._sqr = 0.0  # biased EMAs and their common normaliser (Adam-style bias correction)
        self._trace = 0.0
        self._weight = 0.0
        self.updates = 0
        self._stats: tuple[int, int, GradientStats] | None = None  # (updates, M0, stats): one object per update

    def update(
        self,
        small_sqr: float,
        small_bsz: float,
        big_sqr: float,
        big_bsz: float,
        init_batch_size: int,
        steps: int = 1,
        num_examples: float = math.inf,
    ) -> None:
        """One pair of measurements: mean |G|² over gradients of `small_bsz` examples, |G|² of `big_bsz`, each
        averaged over `steps` optimizer steps (which then weigh as much as that many single updates), the batches
        drawn without replacement from `num_examples` (an epoch of the dataset)."""
        sqr, trace = two_batch_estimates(small_sqr, small_bsz, big_sqr, big_bsz, num_examples)
        decay = self.smoothing ** (steps * big_bsz / init_batch_size)
        self._sqr = decay * self._sqr + (1.0 - decay) * sqr
        self._trace = decay * self._trace + (1.0 - decay) * trace
        self._weight = decay * self._weight + (1.0 - decay)
        self.updates += 1

    @property
    def sqr(self) -> float:
        """Smoothed |g|² (may be ≤ 0 early on, when noise swamps the signal)."""
        return self._sqr / self._weight if self._weight > 0 else 0.0

    @property
    def trace(self) -> float:
        """Smoothed tr(Σ)."""
        return self._trace / self._weight if self._weight > 0 else 0.0

    def grad_stats(self, init_batch_size: int) -> GradientStats | None:
        """GradientStats at M0 (sqr = |g|², var = tr(Σ)/M0), clipped at 0; None before the first update."""
        if self.updates == 0:
            return None
        cached = self._stats
        if cached is None or cached[:2] != (self.updates, init_batch_size):
            stats = GradientStats(sqr=max(self.sqr, 0.0), var=max(self.trace, 0.0) / init_batch_size)
            cached = self._stats = (self.updates, init_batch_size, stats)
        return cached[2]

    def state_dict(self) -> dict[str, Any]:
        return {"sqr": self._sqr, "trace": self._trace, "weight": self._weight, "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._sqr = float(state["sqr"])
        self._trace = float(state["trace"])
        self._weight = float(state["weight"])
        self.updates = int(state["updates"])
        self._stats = None
