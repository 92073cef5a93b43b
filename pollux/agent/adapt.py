"""The agent's side of the batch-size decision (Pollux §3.3): refit the throughput model on what the job ran.

The decision itself is `pollux.goodput.decide_batch`, the code every simulated Pollux job runs too; the agent runs
it on rank 0 with this fit and broadcasts the result, so every replica uses the same batch. Torch-free.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from threadpoolctl import ThreadpoolController

from pollux.goodput import BatchLimits, ThroughputLog, ThroughputParams, ThroughputSamples, fit_throughput
from pollux.goodput.fit import NOISY_BSZ_SPREAD


def refit(log: ThroughputLog, previous: ThroughputParams | None = None) -> ThroughputParams | None:
    """`ThroughputParams` fitted on every configuration logged (warm-started from `previous`), as measured times
    (noisy) are; None before the first logged step."""
    samples = log.samples()
    return None if samples is None else fit_measured(samples, previous)


def fit_measured(samples: ThroughputSamples, previous: ThroughputParams | None = None) -> ThroughputParams:
    """`fit_throughput` on measured step times: noisy, so close batch sizes do not identify the per-example cost.

    It runs with one BLAS thread. L-BFGS-B calls BLAS on 7-element vectors a hundred times per fit; a multi-threaded
    OpenBLAS wakes its threads for each call and spins them between calls, so a fit that takes ~10 ms of one core
    took ~70 ms of CPU, stolen from the training processes beside it (a third of the agent's cost on a 2-core host:
    benchmarks/agent_overhead). The fit is the same to the bit. The limit is process-wide while a fit runs (numpy's
    BLAS on the training thread is limited too, for those milliseconds)."""
    with _blas_controller().limit(limits=1, user_api="blas"):
        return fit_throughput(samples, previous, NOISY_BSZ_SPREAD)


@functools.cache
def _blas_controller() -> ThreadpoolController:
    """The BLAS libraries of this process (inspecting them costs tens of milliseconds: once per process), found once
    scipy.optimize, which the fit imports, has loaded its own."""
    import scipy.optimize  # noqa: F401

    return ThreadpoolController()


# The batch may grow to at most this many times the most examples per replica the job has measured: the throughput
# model extrapolates beyond its samples, and a noisy fit (per-example cost near zero) would send the job to its
# largest batch at once. It measures the new size, and the next decision sees it (the scheduler's bound on GPUs is
# the same idea: docs/design.md, "Goodput model").
BATCH_EXPLORATION_FACTOR = 2


def explored_limits(limits: BatchLimits, max_replica_batch: int, replicas: int) -> BatchLimits:
    """`limits` with the total batch capped at `BATCH_EXPLORATION_FACTOR` × the most examples per replica measured
    (`ThroughputLog.max_replica_batch`) × `replicas`, never below M0; unchanged before any measurement."""
    if max_replica_batch <= 0:
        return limits
    cap = max(limits.init_batch_size, BATCH_EXPLORATION_FACTOR * max_replica_batch * replicas)
    return limits if cap >= limits.max_batch_size else replace(limits, max_batch_size=cap)
