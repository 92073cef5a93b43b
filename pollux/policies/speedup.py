"""What a job's GPUs are worth to it, before any policy weighs it against others: its best goodput on K GPUs (on one
node or across nodes), and its speedup over the fair share (OSDI'21 §4.2: SPEEDUP_j = max goodput on A_j / max
goodput on ⌈G/J⌉ GPUs of one node).

Shared by the Pollux policy's one-type and typed searches (`pollux.policies.pollux`, `pollux.policies.typed_search`)
and the autoscaler (`pollux.autoscale`); it imports no policy.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from pollux.goodput import ThroughputParams, throughput
from pollux.policies.base import JobView
from pollux.policies.placement import fixed_batch_config
from pollux.policies.replicas import by_gpus


def goodput_table(
    job: JobView, max_gpus: int, gpus_per_replica: int = 1, one_node_gpus: int | None = None
) -> np.ndarray:
    """Best goodput for K = 0…max_gpus, row 0 on one node, row 1 across nodes.

    Exact, not an approximation: the best goodput on an allocation depends on its node count only through N > 1
    (T_sync has an intra-node and an inter-node form) and on its replica count K. Jobs that have not run yet scale
    linearly (K, one unit per GPU), as the artifact assumes; jobs with a fixed batch have efficiency 1 and run at
    their fixed per-GPU split; adaptive jobs pick their best batch per allocation. A pipelined job's replica is
    `gpus_per_replica` GPUs: its model is per replica (R = K / k scales its batch), a count of part of a replica is
    worth nothing (`replicas.by_gpus`), and its replica's batch is its micro-batches, with no accumulation beyond.
    `one_node_gpus`: an adaptive data-parallel job's row 0 only up to that many GPUs (0 beyond), for a caller that
    never reads more of one node (`GoodputFunction.best_by_count`).
    """
    if gpus_per_replica > 1:
        return by_gpus(goodput_table(job, max_gpus // gpus_per_replica), gpus_per_replica, max_gpus)
    replicas = np.arange(max_gpus + 1)
    if job.throughput_params is None:
        return np.vstack([replicas, replicas]).astype(np.float64)
    if job.batch_size is None:
        fn = job.goodput_fn()
        assert fn is not None
        return fn.best_by_count(
            max_gpus,
            job.max_batch_size,
            job.local_bsz_bounds,
            accumulation=not job.pipelined,
            one_node_gpus=one_node_gpus,
        )
    return fixed_batch_goodput(job, np.array([[1], [2]]), replicas)


class GoodputTables:
    """`goodput_table` memoized: jobs with the same model, statistics, batch bounds, GPU bound and replica shape share
    one table (a workload that issues every job k times, as Sia's scale workloads do, has k alike), within a round
    and, for the tables a round asks for again (a waiting job's, a job's whose model and statistics did not change),
    from the round before (`new_round`). A table is a pure function of its key, so no result depends on what is
    kept. The tables are shared, so callers must not write into them."""

    def __init__(self) -> None:
        self._tables: dict[tuple[object, ...], np.ndarray] = {}
        self._last: dict[tuple[object, ...], np.ndarray] = {}  # the round before's, until asked for again

    def new_round(self) -> None:
        """Start a round: keep the last round's tables for it, drop those of any round before."""
        self._last, self._tables = self._tables, {}

    def __call__(
        self,
        job: JobView,
        max_gpus: int,
        params: ThroughputParams | None,
        bounds: tuple[int, int],
        gpus_per_replica: int = 1,
        one_node_gpus: int | None = None,
    ) -> np.ndarray:
        """`goodput_table` of `job` with the throughput model `params`, per-GPU batch `bounds` and GPUs per replica
        (those of the GPU type asked about); `one_node_gpus` as there."""
        stats, batch = job.grad_stats, job.batch_size
        # pipelined: no accumulation (`goodput_table`), even on a type where its replica is one GPU
        key = (
            params,
            stats,
            job.init_batch_size,
            job.max_batch_size,
            bounds,
            batch,
            max_gpus,
            gpus_per_replica,
            job.pipelined,
            one_node_gpus,
        )
        table = self._tables.get(key)
        if table is None:
            table = self._last.get(key)
            if table is None:
                view = replace(job, throughput_params=params, local_bsz_bounds=bounds)
                table = goodput_table(view, max_gpus, gpus_per_replica, one_node_gpus)
            self._tables[key] = table
        return table


def fair_share_base(goodput: np.ndarray, fair_gpus: int) -> float:
    """What a job's speedups are relative to: its goodput on the fair share (one node); where the fair share cannot
    run it, its best single-node goodput instead."""
    base = float(goodput[0, fair_gpus])
    return base if base > 0 else max(float(goodput[0].max()), 1e-12)


def speedup_table(job: JobView, fair_gpus: int, max_gpus: int, gpus_per_replica: int = 1) -> np.ndarray:
    """Speedups over the fair share for K = 0…max_gpus, row 0 on one node, row 1 across nodes (`goodput_table`)."""
    return speedups_and_base(job, fair_gpus, max_gpus, gpus_per_replica)[0]


def speedups_and_base(
    job: JobView, fair_gpus: int, max_gpus: int, gpus_per_replica: int = 1, one_node_gpus: int | None = None
) -> tuple[np.ndarray, float]:
    """`speedup_table`, and the goodput on the fair share it divides by (M0-examples/s, where the job has a
    model); `one_node_gpus` as `goodput_table`'s (at least `fair_gpus`, the base's count)."""
    if one_node_gpus is not None:
        one_node_gpus = max(one_node_gpus, fair_gpus)
    goodput = goodput_table(job, max(max_gpus, fair_gpus), gpus_per_replica, one_node_gpus)
    base = fair_share_base(goodput, fair_gpus)
    return goodput[:, : max_gpus + 1] / base, base


def fixed_batch_goodput(job: JobView, nodes: np.ndarray, replicas: np.ndarray) -> np.ndarray:
    """Throughput (efficiency ≡ 1) of a fixed-batch job at each replica count; 0 where the batch cannot split."""
    assert job.batch_size is not None and job.throughput_params is not None
    local = np.zeros(replicas.size, dtype=np.int64)
    accum = np.zeros(replicas.size, dtype=np.int64)
    valid = (replicas >= 1) & (replicas <= max(job.batch_size // job.local_bsz_bounds[0], 1))
    for k in replicas[valid]:
        local[k], accum[k] = fixed_batch_config(
            job.batch_size, int(k), job.init_batch_size, job.max_batch_size, job.local_bsz_bounds
        )
    rate = throughput(job.throughput_params, nodes, np.maximum(replicas, 1), np.maximum(local, 1), accum)
    return np.where(valid, rate, 0.0)
