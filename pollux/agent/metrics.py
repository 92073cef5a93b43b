"""The training script's own metrics (accuracy, loss, ...), reported in one call for the experiment that tunes it
(`pollux tune`, issue 30): `pa.report_metric(accuracy=0.93, step=epoch)`. Torch-free.

Rank 0 appends one JSON line per call to `$POLLUX_METRICS_PATH`, which the service sets for every job: the service
reads the lines it has not seen yet into its state database (table `metrics`, one row per line, numbered from 0 by
its position in the file), and `pollux tune` hands each to Ray Tune. Appending keeps every line a resumed job wrote
before, so a restart from a checkpoint never loses one. Without the variable (a script run by hand) a report does
nothing, so one script serves both. The line's format is declared here once, for the writer and the reader:

    {"at": unix s, "step": int | null, "metrics": {name: finite number, ...}}
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from typing import Any

from pollux.agent import environment
from pollux.errors import AgentError, ReportError


@dataclass(frozen=True)
class MetricRecord:
    """One `report_metric` call: when, at which step (the script's own count, e.g. its epoch), and the values."""

    at: float
    step: int | None
    metrics: dict[str, float]

    def to_line(self) -> str:
        return json.dumps({"at": self.at, "step": self.step, "metrics": self.metrics}, sort_keys=True) + "\n"


def _values(metrics: dict[str, Any], source: str, error: type[AgentError]) -> dict[str, float]:
    if not metrics:
        raise error(f"{source}: no metric given; e.g. report_metric(accuracy=0.93)")
    for name, value in metrics.items():
        if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
            raise error(f"{source}: metric {name!r} must be a finite number, got {value!r}")
    return {name: float(value) for name, value in metrics.items()}


def _step(step: Any, source: str, error: type[AgentError]) -> int | None:
    if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
        raise error(f"{source}: step must be an integer >= 0 or None, got {step!r}")
    return step


def report_metric(step: int | None = None, **metrics: float) -> None:
    """Report the script's metrics now, e.g. `report_metric(accuracy=0.93, step=epoch)`: on rank 0, one line
    appended to `$POLLUX_METRICS_PATH` in one write (a reader never sees half of it); elsewhere, or without the
    variable, nothing. `step` (optional) is the script's own progress count; a tuner ignores a step it saw before
    (a job resumed from an older checkpoint reports it again)."""
    record = MetricRecord(
        time.time(), _step(step, "report_metric", AgentError), _values(metrics, "report_metric", AgentError)
    )
    path = os.environ.get(environment.METRICS_PATH)
    if not path or os.environ.get("RANK", "0") != "0":
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, record.to_line().encode())
    finally:
        os.close(fd)


def parse_metric_line(line: str, source: str) -> MetricRecord:
    """One line of a metrics file; a `ReportError` naming `source` when it is not one `report_metric` writes."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ReportError(f"{source}: not a JSON line ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("metrics"), dict):
        raise ReportError(f"{source}: expected an object with 'metrics' {{name: number}}, got {line.strip()[:80]!r}")
    at = data.get("at")
    if not isinstance(at, int | float) or isinstance(at, bool):
        raise ReportError(f"{source}: field 'at' must be a time in seconds, got {at!r}")
    return MetricRecord(
        float(at), _step(data.get("step"), source, ReportError), _values(data["metrics"], source, ReportError)
    )
