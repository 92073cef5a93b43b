"""The batch-size decision: refit throughput, then maximise goodput on the current allocation (Pollux §3.3).

Pure given its inputs (the throughput log, the fit, the gradient statistics); the agent runs it on rank 0 and
broadcasts the result, so every replica uses the same batch. Torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pollux.agent.throughput_log import ThroughputLog
from pollux.errors import AgentError
from pollux.goodput import GoodputFunction, GradientStats, ThroughputParams, fit_throughput


@dataclass(frozen=True)
class BatchLimits:
    """The user's bounds: M0 (the batch the LR was tuned for), the largest total batch that still converges, the
    per-replica batch range (memory), and whether gradient accumulation may exceed the per-replica maximum."""

    init_batch_size: int
    max_batch_size: int
    local_bsz_bounds: tuple[int, int]
    accumulation: bool

    def __post_init__(self) -> None:
        lo, hi = self.local_bsz_bounds
        if self.init_batch_size < 1 or self.max_batch_size < self.init_batch_size:
            raise AgentError(
                f"autoscale_batch_size: max_batch_size={self.max_batch_size} must be >= the loader's "
                f"batch_size={self.init_batch_size} (M0)"
            )
        if not 1 <= lo <= hi:
            raise AgentError(
                f"autoscale_batch_size: local_bsz_bounds must be (min, max) with 1 <= min <= max, got {lo, hi}"
            )


@dataclass(frozen=True)
class BatchConfig:
    """Per-replica micro-batch m and accumulation steps s: one optimizer step trains K·m·(s+1) examples."""

    local_bsz: int
    accum_steps: int

    def total(self, num_replicas: int) -> int:
        return num_replicas * self.local_bsz * (self.accum_steps + 1)


@dataclass(frozen=True)
class Decision:
    config: BatchConfig
    throughput_params: ThroughputParams | None  # None until a step has been measured
    goodput: float  # predicted M0-examples of progress per second; 0 when not predicted


def initial_config(limits: BatchLimits, num_replicas: int) -> BatchConfig:
    """Before anything is measured: total batch max(M0, K·m_min) (DESIGN.md), split over the K replicas, with
    accumulation where one replica's share exceeds m_max (without accumulation the share is capped at m_max)."""
    lo, hi = limits.local_bsz_bounds
    total = max(limits.init_batch_size, num_replicas * lo)
    share = math.ceil(total / num_replicas)
    accum = math.ceil(share / hi) - 1 if limits.accumulation else 0
    local = min(max(lo, share // (accum + 1)), hi)
    while accum > 0 and num_replicas * local * (accum + 1) > max(limits.max_batch_size, total):
        accum -= 1
    return BatchConfig(local, max(accum, 0))


def refit(log: ThroughputLog, previous: ThroughputParams | None = None) -> ThroughputParams | None:
    """`ThroughputParams` fitted on every configuration logged (warm-started from `previous`); None before the
    first logged step."""
    samples = log.samples()
    return None if samples is None else fit_throughput(samples, initial=previous)


def decide(
    limits: BatchLimits,
    params: ThroughputParams | None,
    grad_stats: GradientStats | None,
    num_nodes: int,
    num_replicas: int,
) -> Decision:
    """The (m, s) that maximise `GoodputFunction.optimize` on this allocation.

    Without a throughput fit or a gradient measurement there is nothing to trade off: the initial configuration.
    """
    if params is None or grad_stats is None:
        return Decision(initial_config(limits, num_replicas), params, 0.0)
    choice = GoodputFunction(params, grad_stats, limits.init_batch_size).optimize(
        num_nodes, num_replicas, limits.max_batch_size, limits.local_bsz_bounds, limits.accumulation
    )
    goodput = float(choice.goodput)
    if goodput <= 0:  # nothing fits the bounds on this many replicas: fall back to the simplest split
        return Decision(initial_config(limits, num_replicas), params, 0.0)
    return Decision(BatchConfig(int(choice.local_bsz), int(choice.accum_steps)), params, goodput)
