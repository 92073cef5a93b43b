"""The agent's side of the batch-size decision (Pollux §3.3): refit the throughput model on what the job ran.

The decision itself is `pollux.goodput.decide_batch`, the code every simulated Pollux job runs too; the agent runs
it on rank 0 with this fit and broadcasts the result, so every replica uses the same batch. Torch-free.
"""

from __future__ import annotations

from pollux.goodput import ThroughputLog, ThroughputParams, ThroughputSamples, fit_throughput
from pollux.goodput.fit import NOISY_BSZ_SPREAD


def refit(log: ThroughputLog, previous: ThroughputParams | None = None) -> ThroughputParams | None:
    """`ThroughputParams` fitted on every configuration logged (warm-started from `previous`), as measured times
    (noisy) are; None before the first logged step."""
    samples = log.samples()
    return None if samples is None else fit_measured(samples, previous)


def fit_measured(samples: ThroughputSamples, previous: ThroughputParams | None = None) -> ThroughputParams:
    """`fit_throughput` on measured step times: noisy, so close batch sizes do not identify the per-example cost."""
    return fit_throughput(samples, previous, NOISY_BSZ_SPREAD)
