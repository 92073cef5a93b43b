"""The environment contract between the scheduler and a job's agent: the variables a launch sets and the agent
reads, with their formats. Torch-free, so the service (`pollux.runtime`) and the agent import this one module."""

from __future__ import annotations

import math

JOB_NAME = "POLLUX_JOB_NAME"
CHECKPOINT_DIR = "POLLUX_CHECKPOINT_DIR"
REPORT_PATH = "POLLUX_REPORT_PATH"  # the JSON report the scheduler reads (docs/agent-report-schema.md)
METRICS_PATH = "POLLUX_METRICS_PATH"  # where `report_metric` appends the script's own metrics (`pollux.agent.metrics`)
CHECKPOINT_INTERVAL_S = "POLLUX_CHECKPOINT_INTERVAL_S"  # seconds > 0, or "auto": the measured save cost decides
NUM_NODES = "POLLUX_NUM_NODES"  # distinct hosts of the group: the N of the throughput model
# What the scheduler tells a job about the GPUs it runs on (report version 2): their type, the model to start from
# on a type the job has not run on yet (the policy's bootstrap estimate, as JSON), and the per-GPU batch bounds of
# that type where its memory differs ("MIN,MAX").
GPU_TYPE = "POLLUX_GPU_TYPE"
THROUGHPUT_BOOTSTRAP = "POLLUX_THROUGHPUT_BOOTSTRAP"
LOCAL_BSZ_BOUNDS = "POLLUX_LOCAL_BSZ_BOUNDS"

AUTO = "auto"


def format_interval(seconds: float | None) -> str:
    """`CHECKPOINT_INTERVAL_S` for an interval in seconds, or None for the automatic one."""
    return AUTO if seconds is None else f"{seconds:g}"


def parse_interval(value: str | None) -> float | None:
    """Seconds > 0, or None when unset, empty or "auto"; ValueError otherwise."""
    if value is None or value.strip() in ("", AUTO):
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"{CHECKPOINT_INTERVAL_S}={value!r}: expected seconds > 0 (e.g. 300) or 'auto'")
    return seconds


def format_bounds(bounds: tuple[int, int]) -> str:
    return f"{bounds[0]},{bounds[1]}"


def parse_bounds(value: str) -> tuple[int, int]:
    """`LOCAL_BSZ_BOUNDS` as (min, max); ValueError naming the variable when malformed."""
    try:
        low, high = (int(v) for v in value.split(","))
    except ValueError:
        raise ValueError(f"{LOCAL_BSZ_BOUNDS}={value!r}: expected MIN,MAX per-GPU batch bounds, e.g. 8,128") from None
    return low, high
