"""The Philly trace (Jeon et al., ATC'19), as the Pollux artifact samples it: its reader, and the distribution of
the kept jobs' GPU-time that Tiresias' 2D-Gittins index needs, in the simulator and in the runtime alike.

The trace is read where it is (`pollux.data.locate`), never copied; without it, the committed quantiles of the
same distribution (`philly_summary.json`, derived by scripts/make_philly_summary.py) stand in.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from pollux.errors import DataNotFoundError, TraceError

SUMMARY_PATH = Path(__file__).resolve().with_name("philly_summary.json")
PHILLY_FILE = "philly-jobs.csv"
PHILLY_COLUMNS: tuple[str, ...] = ("timestamp", "duration", "num_gpus", "gpu_time")
VC_COLUMN = "cluster"  # the virtual cluster a job was submitted to: Philly's teams (optional in a trace file)
HOUR_S = 3600
MIN_DURATION_S = 60.0
MAX_GPU_TIME_S = 1000.0 * HOUR_S
_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}[ T](\d{2}):(\d{2}):(\d{2})$")


@dataclass(frozen=True)
class PhillyTrace:
    """The Philly jobs as arrays: what the generator (and Tiresias' Gittins index) needs, nothing else."""

    path: Path
    second_of_day: np.ndarray  # int64, submission second within its day
    duration_s: np.ndarray
    num_gpus: np.ndarray
    gpu_time_s: np.ndarray
    virtual_cluster: np.ndarray | None = None  # str, each job's VC; None when the file has no `cluster` column

    def kept(self) -> np.ndarray:
        """The artifact's filter: drop jobs shorter than a minute (failed starts) and the few giant ones."""
        return (self.duration_s >= MIN_DURATION_S) & (self.gpu_time_s < MAX_GPU_TIME_S)


def find_philly_trace(data_dir: Path | None = None) -> Path:
    """The trace's path in the data folder; `DataNotFoundError` says why there is none."""
    from pollux.data.locate import find_data_dir

    path = find_data_dir(data_dir).path / PHILLY_FILE
    if not path.is_file():
        raise DataNotFoundError(f"{path} does not exist; the data folder holds no Philly trace")
    return path


def read_philly_trace(path: Path) -> PhillyTrace:
    """Read `philly-jobs.csv` (timestamp,duration,num_gpus,gpu_time,[cluster,]...); cached per file version."""
    path = Path(path).resolve()
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise TraceError(f"{path}: Philly trace not found") from None
    return _read_philly_cached(path, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=2)
def _read_philly_cached(path: Path, _mtime_ns: int, _size: int) -> PhillyTrace:
    """Parse once per (path, version): the trace has 82k rows and tests generate many workloads."""
    seconds, durations, gpus, gpu_times, vcs = [], [], [], [], []
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.reader(handle)
        header = [column.strip() for column in next(reader, [])]
        missing = [column for column in PHILLY_COLUMNS if column not in header]
        if missing:
            raise TraceError(f"{path}:1: missing column(s) {', '.join(missing)}; expected {','.join(PHILLY_COLUMNS)}")
        at = [header.index(column) for column in PHILLY_COLUMNS]
        vc_at = header.index(VC_COLUMN) if VC_COLUMN in header else None
        for row in reader:
            if not row:
                continue
            line = reader.line_num
            if len(row) != len(header):
                raise TraceError(f"{path}:{line}: expected {len(header)} fields ({','.join(header)}), got {len(row)}")
            stamp, duration, num_gpus, gpu_time = (row[i].strip() for i in at)
            match = _TIMESTAMP.match(stamp)
            if match is None or int(match[1]) > 23 or int(match[2]) > 59 or int(match[3]) > 59:
                raise TraceError(f"{path}:{line}: field 'timestamp': expected YYYY-MM-DD HH:MM:SS, got {stamp!r}")
            seconds.append(int(match[1]) * HOUR_S + int(match[2]) * 60 + int(match[3]))
            durations.append(_non_negative(path, line, "duration", duration))
            gpus.append(_non_negative(path, line, "num_gpus", num_gpus))
            gpu_times.append(_non_negative(path, line, "gpu_time", gpu_time))
            if vc_at is not None:
                vcs.append(row[vc_at].strip())
    if not seconds:
        raise TraceError(f"{path}:2: no jobs after the header")
    return PhillyTrace(
        path=path,
        second_of_day=np.array(seconds, dtype=np.int64),
        duration_s=np.array(durations, dtype=np.float64),
        num_gpus=np.array(gpus, dtype=np.int64),
        gpu_time_s=np.array(gpu_times, dtype=np.float64),
        virtual_cluster=np.array(vcs, dtype=np.str_) if vc_at is not None else None,
    )


def _non_negative(path: Path, line: int, field: str, text: str) -> float:
    """A finite number >= 0 (durations and GPU counts)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (np.isfinite(value) and value >= 0):
        raise TraceError(f"{path}:{line}: field {field!r}: expected a non-negative number, got {text!r}")
    return value


def philly_service_samples(data_dir: Path | None = None) -> list[float]:
    """GPU-seconds of the Philly jobs the artifact samples from (duration >= 60 s, < 1,000 GPU-hours); without
    the trace, the committed quantiles of the same distribution."""
    try:
        trace = read_philly_trace(find_philly_trace(data_dir))
    except DataNotFoundError:
        try:
            return [float(q) for q in json.loads(SUMMARY_PATH.read_text(encoding="utf-8"))["gpu_time_quantiles_s"]]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise DataNotFoundError(
                f"{SUMMARY_PATH}: unreadable ({error}); rerun scripts/make_philly_summary.py"
            ) from error
    return trace.gpu_time_s[trace.kept()].tolist()
