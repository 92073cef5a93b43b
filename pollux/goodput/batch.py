"""A job's batch-size decision (Pollux §3.3): the (m, s) it trains with on the replicas it holds.

One function, `decide_batch`, for every adaptive job: the agent calls it on rank 0 of a real job, the simulator
calls it for every simulated Pollux job, so the two cannot drift apart. Pure: no torch, no I/O, no clock.

The one rounding rule. Per-GPU batches round *up*, here (`initial_config`) as in the candidates of
`GoodputFunction.optimize`: M examples over K replicas and s+1 micro-steps run m = ⌈M/(K(s+1))⌉, so a step trains at
least the M asked for. Rounding down, as our agent once did, starts a job below M0, where its learning rate was tuned
and where the goodput model never looks (M0 = 128 on 3 replicas with m_max = 32: 3·21·2 = 126 examples). The
artifact's agents round up too (AdaptDL: ⌈M0/K⌉), and with it the simulator keeps the published completion times.
Where rounding up would pass the max total batch, m drops to the largest that fits.
"""

from __future__ import annotations

from dataclasses import dataclass

from pollux.goodput.efficiency import GradientStats
from pollux.goodput.function import GoodputFunction
from pollux.goodput.throughput import ThroughputParams


@dataclass(frozen=True)
class BatchLimits:
    """The user's bounds: M0 (the batch the LR was tuned for), the largest total batch that still converges, the
    per-replica batch range (memory), and whether gradient accumulation may exceed the per-replica maximum."""

    init_batch_size: int
    max_batch_size: int
    local_bsz_bounds: tuple[int, int]
    accumulation: bool = True

    def __post_init__(self) -> None:
        lo, hi = self.local_bsz_bounds
        if self.init_batch_size < 1 or self.max_batch_size < self.init_batch_size:
            raise ValueError(
                f"max_batch_size={self.max_batch_size} must be >= init_batch_size={self.init_batch_size} (M0, the "
                "batch the learning rate was tuned for), and M0 >= 1"
            )
        if not 1 <= lo <= hi:
            raise ValueError(f"local_bsz_bounds must be (min, max) with 1 <= min <= max, got {lo, hi}")


@dataclass(frozen=True)
class BatchConfig:
    """Per-replica micro-batch m and accumulation steps s: one optimizer step trains K·m·(s+1) examples."""

    local_bsz: int
    accum_steps: int = 0

    def total(self, num_replicas: int) -> int:
        return num_replicas * self.local_bsz * (self.accum_steps + 1)


@dataclass(frozen=True)
class BatchDecision:
    config: BatchConfig
    goodput: float  # predicted M0-examples of progress per second; 0 when not predicted (the initial split)


def initial_config(limits: BatchLimits, num_replicas: int) -> BatchConfig:
    """Before anything is measured, or when no configuration fits the bounds: the total max(M0, K·m_min)
    (docs/design.md, "Goodput model") split over the K replicas, with accumulation where one replica's share
    passes m_max.

    share = ⌈total/K⌉, s = ⌈share/m_max⌉ − 1 (0 without accumulation), m = ⌈share/(s+1)⌉ (rounded up, module
    docstring) kept within [m_min, m_max]; the memory bound m_max and the max total batch win over the floor
    m_min where they conflict (more replicas than max batch / m_min).
    """
    lo, hi = limits.local_bsz_bounds
    total = max(limits.init_batch_size, num_replicas * lo)
    share = -(-total // num_replicas)
    accum = -(-share // hi) - 1 if limits.accumulation else 0
    local = min(max(-(-share // (accum + 1)), lo), hi, limits.max_batch_size // (num_replicas * (accum + 1)))
    return BatchConfig(max(local, 1), accum)


def decide_batch(
    limits: BatchLimits,
    params: ThroughputParams | None,
    grad_stats: GradientStats | None,
    num_nodes: int,
    num_replicas: int,
) -> BatchDecision:
    """The (m, s) that maximise `GoodputFunction.optimize` on this allocation of `num_replicas` GPUs over
    `num_nodes` nodes.

    Without a throughput fit or a gradient measurement there is nothing to trade off, and where no configuration
    fits the bounds (goodput 0) there is nothing to choose from: the initial configuration in both cases.
    """
    if params is None or grad_stats is None:
        return BatchDecision(initial_config(limits, num_replicas), 0.0)
    choice = GoodputFunction(params, grad_stats, limits.init_batch_size).optimize(
        num_nodes, num_replicas, limits.max_batch_size, limits.local_bsz_bounds, limits.accumulation
    )
    goodput = float(choice.goodput)
    if goodput <= 0:
        return BatchDecision(initial_config(limits, num_replicas), 0.0)
    return BatchDecision(BatchConfig(int(choice.local_bsz), int(choice.accum_steps)), goodput)
