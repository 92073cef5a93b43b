"""Learning-rate scaling rules: how the LR tuned for batch M0 changes when a step uses batch M (Pollux §3.3).

The agent multiplies every parameter group's LR by `lr_factor(...)` for the duration of one optimizer step, so the
user's LR scheduler keeps owning the base LR. Subclass `ScalingRule` for your own rule. Torch-free.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

from pollux.goodput import GradientStats, adascale_gain


class ScalingRule(ABC):
    """LR multiplier for a step at total batch `batch_size`, given the LR was tuned for `init_batch_size`."""

    @abstractmethod
    def lr_factor(self, batch_size: int, init_batch_size: int, grad_stats: GradientStats | None) -> float:
        """`grad_stats` are the agent's current measurement at M0 (None until the first one)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class AdaScale(ScalingRule):
    """AdaScale (Johnson et al. 2020): the gain ratio r = (var + sqr)/(var/(M/M0) + sqr) ∈ [1, M/M0], i.e. as
    much faster as the batch's lower gradient variance warrants: linear while noise dominates, none once it
    doesn't. The same gain counts the job's progress in M0-steps."""

    def __init__(self) -> None:
        self._last: tuple[int, int, GradientStats, float] | None = None  # the statistics change every few steps

    def lr_factor(self, batch_size: int, init_batch_size: int, grad_stats: GradientStats | None) -> float:
        if grad_stats is None:
            return 1.0
        last = self._last
        if last is None or last[:3] != (batch_size, init_batch_size, grad_stats):
            gain = float(adascale_gain(grad_stats, init_batch_size, batch_size))
            last = self._last = (batch_size, init_batch_size, grad_stats, gain)
        return last[3]


class SqrtScale(ScalingRule):
    """Square-root scaling (Krizhevsky 2014; common for Adam): LR × sqrt(M/M0)."""

    def lr_factor(self, batch_size: int, init_batch_size: int, grad_stats: GradientStats | None) -> float:
        return math.sqrt(batch_size / init_batch_size)


class LinearScale(ScalingRule):
    """Linear scaling (Goyal et al. 2017): LR × M/M0."""

    def lr_factor(self, batch_size: int, init_batch_size: int, grad_stats: GradientStats | None) -> float:
        return batch_size / init_batch_size


class NoScale(ScalingRule):
    """Keep the LR whatever the batch size."""

    def lr_factor(self, batch_size: int, init_batch_size: int, grad_stats: GradientStats | None) -> float:
        return 1.0
