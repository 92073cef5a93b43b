"""What the simulator needs to know about a job type: one interface for measured profiles and parametric types.

Units: seconds for times; batch sizes in examples; progress in *M0-steps* (one optimizer step at the initial batch
size M0 advances progress by 1; a step at batch M in epoch e advances it by the AdaScale gain of that epoch's
gradient statistics). A job has completed `e` epochs once its progress reaches `epoch_progress(e)`, and is done at
`epoch_progress(max_epochs)` (docs/design.md, "Simulated jobs").
"""

from __future__ import annotations

from typing import Protocol, TypeVar

import numpy as np

from pollux.goodput import GradientStats, adascale_gain

Steps = TypeVar("Steps", float, np.ndarray)


class JobModel(Protocol):
    """A job type as the simulator sees it. Implementations: `MeasuredJobModel`, `ParametricJobModel`."""

    @property
    def name(self) -> str:
        """The application, e.g. "cifar10"."""
        ...

    @property
    def init_batch_size(self) -> int:
        """M0, examples."""
        ...

    @property
    def max_batch_size(self) -> int:
        """The largest total batch the job may use, examples."""
        ...

    @property
    def min_local_bsz(self) -> int:
        """Smallest per-GPU micro-batch, examples."""
        ...

    @property
    def max_local_bsz(self) -> int:
        """Largest per-GPU micro-batch (GPU memory), examples."""
        ...

    @property
    def max_epochs(self) -> int:
        """The job completes after this many epochs."""
        ...

    def step_time(self, placement: tuple[int, ...], local_bsz: int) -> tuple[float, float]:
        """(step_time_s, sync_time_s) of one optimizer step without accumulation.

        `placement` gives the GPUs used on each node (zeros allowed, any node order); `local_bsz` is the per-GPU
        batch. With s accumulation steps a step lasts `accumulated_step_time(step, sync, s)`.
        """
        ...

    def grad_stats(self, batch_size: float, epoch: int) -> GradientStats:
        """Gradient statistics (sqr, var at M0 scale) a run at total batch `batch_size` shows during `epoch`
        (0-based); they set that epoch's gain = (var + sqr) / (var·M0/M + sqr)."""
        ...

    def epoch_progress(self, epoch: int) -> float:
        """Cumulative progress (M0-steps) at which `epoch` epochs are complete; 0 for epoch 0."""
        ...


def normalize_placement(placement: tuple[int, ...]) -> tuple[int, ...]:
    """Drop empty nodes and rotate to the lexicographically smallest rotation, as the artifact does.

    Rotations describe the same ring of nodes; other permutations (1414 vs 1144) are kept apart.
    """
    nodes = tuple(int(g) for g in placement if g)
    if not nodes:
        raise ValueError(f"placement {placement!r} has no GPUs")
    return min(nodes[i:] + nodes[:i] for i in range(len(nodes)))


def accumulated_step_time(step_s: Steps, sync_s: Steps, accum_steps: Steps) -> Steps:
    """Seconds of one optimizer step with `accum_steps` accumulation micro-steps, from the (step, sync) times of a
    step without: step + s·(step − sync), as the artifact counts it (each extra micro-step repeats the compute, not
    the all-reduce). Floats or arrays alike."""
    return step_s + accum_steps * (step_s - sync_s)


def run_time_s(model: JobModel, placement: tuple[int, ...], local_bsz: int, accum_steps: int = 0) -> float:
    """Seconds to train `model` to completion on a fixed placement and batch configuration, with no restarts.

    The yardstick of a job's speed on one configuration (finish-time fairness, tests of the engine): every epoch
    lasts (its progress / gain) steps of step + s·(step − sync) seconds.
    """
    step_s, sync_s = model.step_time(placement, local_bsz)
    iteration_s = accumulated_step_time(step_s, sync_s, accum_steps)
    batch_size = sum(placement) * local_bsz * (accum_steps + 1)
    total_s = 0.0
    for epoch in range(model.max_epochs):
        stats = model.grad_stats(batch_size, epoch)
        gain = adascale_gain(stats, model.init_batch_size, batch_size)
        progress = model.epoch_progress(epoch + 1) - model.epoch_progress(epoch)
        total_s += progress / gain * iteration_s
    return total_s
