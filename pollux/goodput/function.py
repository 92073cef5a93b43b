"""GOODPUT = THROUGHPUT × EFFICIENCY for one job, and the batch-size choice that maximizes it (Pollux §3.3).

A `GoodputFunction` is the whole of what a scheduler needs to know about a job: built by the agent from its fitted
`ThroughputParams` and measured `GradientStats`, evaluated by policies over arrays of candidate allocations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from pollux.goodput.efficiency import GradientStats, efficiency
from pollux.goodput.throughput import ThroughputParams, compute_time, step_time, sync_time, throughput

BATCH_GRID_SIZE = 64  # candidate total batch sizes per allocation, geometrically spaced


@dataclass(frozen=True)
class BatchChoice:
    """Best configuration per allocation (arrays shaped like the broadcast allocation inputs).

    `goodput` is 0 where no configuration fits the bounds (e.g. too many replicas for the max batch size).
    """

    goodput: np.ndarray
    local_bsz: np.ndarray
    accum_steps: np.ndarray


@dataclass(frozen=True)
class GoodputFunction:
    """Goodput of one job as a function of (nodes, replicas, per-GPU batch, accumulation steps)."""

    throughput_params: ThroughputParams
    grad_stats: GradientStats
    init_batch_size: int

    def efficiency(self, batch_size: ArrayLike) -> np.ndarray:
        return efficiency(self.grad_stats, self.init_batch_size, batch_size)

    def throughput(
        self, num_nodes: ArrayLike, num_replicas: ArrayLike, local_bsz: ArrayLike, accum_steps: ArrayLike = 0
    ) -> np.ndarray:
        return throughput(self.throughput_params, num_nodes, num_replicas, local_bsz, accum_steps)

    def goodput(
        self, num_nodes: ArrayLike, num_replicas: ArrayLike, local_bsz: ArrayLike, accum_steps: ArrayLike = 0
    ) -> np.ndarray:
        """M0-examples of statistical progress per second."""
        batch = np.asarray(num_replicas) * np.asarray(local_bsz) * (np.asarray(accum_steps) + 1)
        return self.throughput(num_nodes, num_replicas, local_bsz, accum_steps) * self.efficiency(batch)

    def optimize(
        self,
        num_nodes: ArrayLike,
        num_replicas: ArrayLike,
        max_batch_size: int | None = None,
        local_bsz_bounds: tuple[int, int] | None = None,
        accumulation: bool = False,
    ) -> BatchChoice:
        """Best (goodput, per-GPU batch m, accumulation steps s) for each allocation, vectorized.

        Candidates: `BATCH_GRID_SIZE` totals M spaced geometrically from max(M0, K·m_min) to the largest total
        the bounds allow; for each, the smallest s whose m = ⌈M/(K(s+1))⌉ fits in m_max (s = 0 without
        accumulation). m rounds up, as the artifact's agents do: rounding down would run most candidates one
        example short of what was asked, often below m_max (yolov3: 7 of its 8 examples per GPU), a throughput
        loss on every step. Where rounding up passes the max total batch, m drops to the largest that fits (what
        the job can run). Every returned configuration satisfies m_min ≤ m ≤ m_max and K·m·(s+1) ≤ max batch.
        """
        nodes, replicas = np.broadcast_arrays(np.asarray(num_nodes), np.asarray(num_replicas))
        shape = nodes.shape
        nodes = nodes.reshape(-1, 1).astype(np.int64)
        replicas = replicas.reshape(-1, 1).astype(np.int64)
        local, accum, fits = self._candidates(replicas, max_batch_size, local_bsz_bounds, accumulation)
        replicas = np.maximum(replicas, 1)
        goodput = np.where(fits, self.goodput(nodes, replicas, local, accum), 0.0)

        best = np.argmax(goodput, axis=1)
        rows = np.arange(goodput.shape[0])
        return BatchChoice(
            goodput=goodput[rows, best].reshape(shape),
            local_bsz=local[rows, best].astype(np.int64).reshape(shape),
            accum_steps=accum[rows, best].astype(np.int64).reshape(shape),
        )

    def best_by_count(
        self,
        max_gpus: int,
        max_batch_size: int | None = None,
        local_bsz_bounds: tuple[int, int] | None = None,
        accumulation: bool = False,
    ) -> np.ndarray:
        """The best goodput on K = 0…max_gpus GPUs, row 0 on one node, row 1 across nodes: `optimize`'s goodput on
        that (2, max_gpus + 1) grid, the same numbers, about half the work. The batch candidates, T_grad and the
        efficiency depend on K only, so they are computed once; only T_sync differs between the rows."""
        replicas = np.arange(max_gpus + 1, dtype=np.int64).reshape(-1, 1)
        local, accum, fits = self._candidates(replicas, max_batch_size, local_bsz_bounds, accumulation)
        replicas = np.maximum(replicas, 1)
        batch = replicas * local * (accum + 1)
        t_grad = compute_time(self.throughput_params, local)
        efficiency = self.efficiency(batch)
        best = np.empty((2, max_gpus + 1))
        for row, nodes in enumerate((1, 2)):
            t_sync = sync_time(self.throughput_params, nodes, replicas)
            rate = batch / step_time(self.throughput_params, t_grad, t_sync, accum)
            best[row] = np.where(fits, rate * efficiency, 0.0).max(axis=1)
        return best

    def _candidates(
        self,
        replicas: np.ndarray,
        max_batch_size: int | None,
        local_bsz_bounds: tuple[int, int] | None,
        accumulation: bool,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per GPU count (a column of `replicas`), the `BATCH_GRID_SIZE` candidate (m, s) of `optimize` and which
        of them fit the bounds."""
        active = replicas >= 1  # no GPUs, no goodput
        replicas = np.maximum(replicas, 1)
        max_batch = self.init_batch_size if max_batch_size is None else int(max_batch_size)
        lo_bsz, hi_bsz = local_bsz_bounds or (1, max_batch)
        if not 1 <= lo_bsz <= hi_bsz:
            raise ValueError(f"local_bsz_bounds must satisfy 1 <= min <= max, got {local_bsz_bounds}")

        largest = max_batch if accumulation else np.minimum(max_batch, replicas * hi_bsz)
        smallest = np.maximum(self.init_batch_size, replicas * lo_bsz)
        feasible = (smallest <= largest) & active
        upper = np.maximum(largest, smallest)
        frac = np.linspace(0.0, 1.0, BATCH_GRID_SIZE).reshape(1, -1)
        totals = np.exp(np.log(smallest) + frac * (np.log(upper) - np.log(smallest)))

        per_replica = totals / replicas
        accum = np.maximum(np.ceil(per_replica / hi_bsz - 1e-9) - 1, 0) if accumulation else 0 * per_replica
        local = np.minimum(np.ceil(per_replica / (accum + 1) - 1e-9), max_batch // (replicas * (accum + 1)))
        fits = (local >= lo_bsz) & (local <= hi_bsz) & feasible
        return np.clip(local, lo_bsz, hi_bsz), accum, fits
