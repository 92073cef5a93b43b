"""The goodput model (Pollux §3): one copy, shared by the agent, every policy, the simulator and the runtime.

Pure numpy/scipy: no torch, no I/O, no clock.
"""

from pollux.goodput.batch import BatchConfig, BatchDecision, BatchLimits, decide_batch, initial_config
from pollux.goodput.efficiency import GradientStats, adascale_gain, efficiency, noise_scale
from pollux.goodput.fit import ThroughputSamples, fit_throughput, rmsle
from pollux.goodput.function import BatchChoice, GoodputFunction
from pollux.goodput.log import ThroughputLog
from pollux.goodput.throughput import (
    ThroughputParams,
    compute_time,
    iteration_time,
    scaled_params,
    sync_time,
    throughput,
)

__all__ = [
    "BatchChoice",
    "BatchConfig",
    "BatchDecision",
    "BatchLimits",
    "GoodputFunction",
    "GradientStats",
    "ThroughputLog",
    "ThroughputParams",
    "ThroughputSamples",
    "adascale_gain",
    "compute_time",
    "decide_batch",
    "efficiency",
    "fit_throughput",
    "initial_config",
    "iteration_time",
    "noise_scale",
    "rmsle",
    "scaled_params",
    "sync_time",
    "throughput",
]
