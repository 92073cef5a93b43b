"""SPEEDUP of a job on an allocation over its fair share (Pollux §4.2), cheap enough for 10⁵ calls a round.

Why a table is exact, not an approximation: the best goodput on an allocation depends on the node count only
through N > 1 (T_sync has an intra-node and an inter-node form) and on the replica count K. So one `optimize` call
over K = 0…K_max for both forms fills a (2, K_max+1) table, and every later call is an array lookup. The table
grows (doubling) when a larger K is asked for.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from pollux.goodput.function import GoodputFunction


class SpeedupFunction:
    """SPEEDUP(N, K) = max goodput on (N, K) / max goodput on the fair share (`base_nodes`, `base_replicas`)."""

    def __init__(
        self,
        goodput_fn: GoodputFunction,
        base_nodes: int,
        base_replicas: int,
        max_batch_size: int | None = None,
        local_bsz_bounds: tuple[int, int] | None = None,
        accumulation: bool = False,
    ) -> None:
        self._goodput_fn = goodput_fn
        self._kwargs = {
            "max_batch_size": max_batch_size,
            "local_bsz_bounds": local_bsz_bounds,
            "accumulation": accumulation,
        }
        base = goodput_fn.optimize(base_nodes, base_replicas, **self._kwargs).goodput
        self._base_goodput = float(base)
        self._table = np.zeros((2, 0))
        self._grow(max(2 * base_replicas, 8))

    @property
    def base_goodput(self) -> float:
        return self._base_goodput

    def _grow(self, max_replicas: int) -> None:
        replicas = np.arange(max_replicas + 1)
        nodes = np.array([[1], [2]])  # single-node form, multi-node form
        best = self._goodput_fn.optimize(nodes, replicas[None, :], **self._kwargs).goodput
        scale = 1.0 / self._base_goodput if self._base_goodput > 0 else 0.0
        self._table = best * scale

    def __call__(self, num_nodes: ArrayLike, num_replicas: ArrayLike) -> np.ndarray:
        """Vectorized lookup; 0 for K = 0 (and for any allocation no batch configuration fits)."""
        nodes = np.asarray(num_nodes)
        replicas = np.asarray(num_replicas)
        top = int(np.max(replicas, initial=0))
        if top >= self._table.shape[1]:
            self._grow(max(top, 2 * (self._table.shape[1] - 1)))
        return self._table[(nodes > 1).astype(np.intp), replicas]
