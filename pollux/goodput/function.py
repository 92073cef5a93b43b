"""GOODPUT = THROUGHPUT × EFFICIENCY for one job, and the batch-size choice that maximizes it (Pollux §3.3).

A `GoodputFunction` is the whole of what a scheduler needs to know about a job: built by the agent from its fitted
`ThroughputParams` and measured `GradientStats`, evaluated by policies over arrays of candidate allocations.
"""

from __future__ import annotations

import functools
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
        local, accum, fits = batch_candidates(
            replicas, self.init_batch_size, max_batch_size, local_bsz_bounds, accumulation
        )
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
        one_node_gpus: int | None = None,
    ) -> np.ndarray:
        """The best goodput on K = 0…max_gpus GPUs, row 0 on one node, row 1 across nodes: `optimize`'s goodput on
        that (2, max_gpus + 1) grid, the same numbers, about half the work. The batch candidates and batch sizes
        depend on K and the bounds only (`count_grid`, kept from call to call), T_grad and the efficiency on K only,
        so they are computed once; only T_sync differs between the rows. `one_node_gpus`: row 0 only up to that
        many GPUs (0 beyond: no node holds them), for a caller that never asks more of one node."""
        grid = count_grid(max_gpus, self.init_batch_size, max_batch_size, local_bsz_bounds, accumulation)
        t_grad = compute_time(self.throughput_params, grid.local)
        efficiency = self.efficiency(grid.batch)
        best = np.zeros((2, max_gpus + 1))
        for row, nodes in enumerate((1, 2)):
            upto = max_gpus if row or one_node_gpus is None else min(max(one_node_gpus, 0), max_gpus)
            replicas, accum, batch = grid.replicas[: upto + 1], grid.accum[: upto + 1], grid.batch[: upto + 1]
            t_sync = sync_time(self.throughput_params, nodes, replicas)
            rate = batch / step_time(self.throughput_params, t_grad[: upto + 1], t_sync, accum)
            best[row, : upto + 1] = np.where(grid.fits[: upto + 1], rate * efficiency[: upto + 1], 0.0).max(axis=1)
        return best


def batch_candidates(
    replicas: np.ndarray,
    init_batch_size: int,
    max_batch_size: int | None,
    local_bsz_bounds: tuple[int, int] | None,
    accumulation: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per GPU count (a column of `replicas`), the `BATCH_GRID_SIZE` candidate (m, s) of `GoodputFunction.optimize`
    and which of them fit the bounds: a function of the counts and the bounds only, not of the job's models."""
    active = replicas >= 1  # no GPUs, no goodput
    replicas = np.maximum(replicas, 1)
    max_batch = init_batch_size if max_batch_size is None else int(max_batch_size)
    lo_bsz, hi_bsz = local_bsz_bounds or (1, max_batch)
    if not 1 <= lo_bsz <= hi_bsz:
        raise ValueError(f"local_bsz_bounds must satisfy 1 <= min <= max, got {local_bsz_bounds}")

    largest = max_batch if accumulation else np.minimum(max_batch, replicas * hi_bsz)
    smallest = np.maximum(init_batch_size, replicas * lo_bsz)
    feasible = (smallest <= largest) & active
    upper = np.maximum(largest, smallest)
    frac = np.linspace(0.0, 1.0, BATCH_GRID_SIZE).reshape(1, -1)
    totals = np.exp(np.log(smallest) + frac * (np.log(upper) - np.log(smallest)))

    per_replica = totals / replicas
    accum = np.maximum(np.ceil(per_replica / hi_bsz - 1e-9) - 1, 0) if accumulation else 0 * per_replica
    local = np.minimum(np.ceil(per_replica / (accum + 1) - 1e-9), max_batch // (replicas * (accum + 1)))
    fits = (local >= lo_bsz) & (local <= hi_bsz) & feasible
    return np.clip(local, lo_bsz, hi_bsz), accum, fits


@dataclass(frozen=True)
class CountGrid:
    """`best_by_count`'s candidates for K = 0…max GPUs (a column of `replicas`, at least 1): per-GPU batch, extra
    accumulation steps, total batch, and which fit the bounds. Shared between calls, so read-only."""

    replicas: np.ndarray
    local: np.ndarray
    accum: np.ndarray
    batch: np.ndarray
    fits: np.ndarray


@functools.lru_cache(maxsize=256)  # a 32x round asks for 50-130 (about 200 KB each at 64 GPUs): a bound on memory
def count_grid(
    max_gpus: int,
    init_batch_size: int,
    max_batch_size: int | None,
    local_bsz_bounds: tuple[int, int] | None,
    accumulation: bool,
) -> CountGrid:
    """The candidates of every count up to `max_gpus` under these bounds, computed once: a scheduling round asks for
    hundreds of goodput tables, most of them under bounds another table had (jobs of the same model), and the
    candidates are half a table's work."""
    counts = np.arange(max_gpus + 1, dtype=np.int64).reshape(-1, 1)
    local, accum, fits = batch_candidates(counts, init_batch_size, max_batch_size, local_bsz_bounds, accumulation)
    replicas = np.maximum(counts, 1)
    batch = replicas * local * (accum + 1)
    grid = CountGrid(replicas, local, accum, batch, fits)
    for array in (grid.replicas, grid.local, grid.accum, grid.batch, grid.fits):
        array.flags.writeable = False
    return grid
