"""System throughput model (Pollux §3.2): how long one optimizer step takes on an allocation.

    T_grad(m)       = α_c + β_c·m                                   compute of one micro-batch of m examples
    T_sync(K, N)    = 0 (K = 1) | α_r + β_r·max(K−2, 0) (N = 1) | α_n + β_n·max(K−2, 0) (N > 1)
    T_iter(K,N,m,s) = s·T_grad(m) + (T_grad(m)^γ + T_sync(K,N)^γ)^(1/γ)

s accumulation micro-steps only compute; the last one overlaps its backward pass with the all-reduce, and γ says
how well (1: not at all, the times add; → ∞: fully, the slower one wins). Everything here broadcasts over arrays,
because a scheduling round evaluates thousands of candidate allocations at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

PARAM_NAMES: tuple[str, ...] = ("alpha_c", "beta_c", "alpha_r", "beta_r", "alpha_n", "beta_n", "gamma")


@dataclass(frozen=True)
class ThroughputParams:
    """Fitted constants of the throughput model, in seconds (β_c per example, β_r/β_n per extra replica)."""

    alpha_c: float
    beta_c: float
    alpha_r: float
    beta_r: float
    alpha_n: float
    beta_n: float
    gamma: float

    def __post_init__(self) -> None:
        values = self.to_array()
        if not np.all(np.isfinite(values)) or np.any(values[:6] < 0):
            raise ValueError(f"ThroughputParams need finite, non-negative values, got {self}")
        if self.gamma < 1:
            raise ValueError(f"ThroughputParams.gamma must be >= 1 (1 = no overlap), got {self.gamma}")

    def to_array(self) -> np.ndarray:
        # the fields by name: dataclasses.astuple deep-copies field by field, a cost a round pays thousands of times
        values = (self.alpha_c, self.beta_c, self.alpha_r, self.beta_r, self.alpha_n, self.beta_n, self.gamma)
        return np.array(values, dtype=np.float64)

    @classmethod
    def from_array(cls, values: ArrayLike) -> ThroughputParams:
        return cls(*(float(v) for v in np.asarray(values, dtype=np.float64)))


def compute_time(params: ThroughputParams, local_bsz: ArrayLike) -> np.ndarray:
    """T_grad(m): seconds for forward + backward of one micro-batch of `local_bsz` examples on one GPU."""
    return params.alpha_c + params.beta_c * np.asarray(local_bsz, dtype=np.float64)


def sync_time(params: ThroughputParams, num_nodes: ArrayLike, num_replicas: ArrayLike) -> np.ndarray:
    """T_sync(K, N): seconds of gradient all-reduce; zero on one replica, dearer across nodes."""
    num_nodes = np.asarray(num_nodes)
    num_replicas = np.asarray(num_replicas)
    extra = np.maximum(num_replicas - 2, 0)
    intra = params.alpha_r + params.beta_r * extra
    inter = params.alpha_n + params.beta_n * extra
    return np.where(num_replicas <= 1, 0.0, np.where(num_nodes > 1, inter, intra))


def overlap(t_grad: np.ndarray, t_sync: np.ndarray, gamma: float) -> np.ndarray:
    """(T_grad^γ + T_sync^γ)^(1/γ), computed as max·(1 + (min/max)^γ)^(1/γ) so large γ cannot overflow."""
    hi = np.maximum(t_grad, t_sync)
    lo = np.minimum(t_grad, t_sync)
    ratio = np.divide(lo, hi, out=np.zeros_like(hi), where=hi > 0)
    return hi * (1.0 + ratio**gamma) ** (1.0 / gamma)


def iteration_time(
    params: ThroughputParams,
    num_nodes: ArrayLike,
    num_replicas: ArrayLike,
    local_bsz: ArrayLike,
    accum_steps: ArrayLike = 0,
) -> np.ndarray:
    """T_iter: seconds per optimizer step of K·m·(s+1) examples. Broadcasts over all four arguments."""
    t_grad = compute_time(params, local_bsz)
    return step_time(params, t_grad, sync_time(params, num_nodes, num_replicas), accum_steps)


def step_time(params: ThroughputParams, t_grad: np.ndarray, t_sync: np.ndarray, accum_steps: ArrayLike) -> np.ndarray:
    """T_iter from its parts: s compute-only micro-steps, then the last one overlapped with the all-reduce. Apart so
    that a caller can compute T_grad once for several T_sync (one node, several nodes)."""
    return np.asarray(accum_steps) * t_grad + overlap(t_grad, t_sync, params.gamma)


def throughput(
    params: ThroughputParams,
    num_nodes: ArrayLike,
    num_replicas: ArrayLike,
    local_bsz: ArrayLike,
    accum_steps: ArrayLike = 0,
) -> np.ndarray:
    """Examples per second: M / T_iter with M = K·m·(s+1)."""
    batch = np.asarray(num_replicas) * np.asarray(local_bsz) * (np.asarray(accum_steps) + 1)
    return batch / iteration_time(params, num_nodes, num_replicas, local_bsz, accum_steps)


def scaled_params(params: ThroughputParams, speed_ratio: float) -> ThroughputParams:
    """The throughput model of a GPU type a job has not run on, bootstrapped from one it has (docs/design.md,
    "Heterogeneous clusters"): every time divided by `speed_ratio`, the new type's 1-GPU throughput over the known
    type's, so every configuration is predicted exactly `speed_ratio` times as fast as on the known type, at the
    same (nodes, GPUs, batch), and no faster. γ, the overlap of compute and all-reduce, is kept."""
    if not np.isfinite(speed_ratio) or speed_ratio <= 0:
        raise ValueError(f"speed_ratio must be a positive number, got {speed_ratio}")
    times = params.to_array()
    times[:6] /= speed_ratio
    return ThroughputParams.from_array(times)
