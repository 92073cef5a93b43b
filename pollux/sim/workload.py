"""Workloads: which jobs arrive when, and the GPUs and batch size their users asked for (docs/design.md, Workloads).

A workload is the artifacts' CSV schema `name,time,application,num_replicas,batch_size`: `time` is the submission
time in seconds from the start of the workload: whole in the artifacts' files (Sia's Helios traces write them as
`225.0`), with a fraction in real traces (`487.661836`), kept as written. The simulator steps in rounds: a job is
considered by the first round at or after its submission, and its JCT counts from the submission itself.
`num_replicas` and `batch_size` are the user's request, kept by the baselines and ignored by Pollux. An optional
column `tenant` names the team a job belongs to (`pollux.tenants`; without it, every job is the default tenant's).
Optional columns `trials` and `concurrency` make a row an experiment (`pollux.sim.experiments`): N trials of its
application, K at a time, each trial a job with the row's request; a row with both empty is one job, as before.
Read one from a path, or by its artifact name from that artifact's data folder: the Pollux artifact's `workload-1`,
`workloads-2.0/workload-3`, `workloads-realistic/workload-2`; the Sia artifact's `philly/workload-3` and
`saturn/workload-7` (Helios), and its Helios workloads at an arrival rate of 10-50 jobs an hour, `rate_30/workload-4`
(Figure 7), or with every job issued k times, `scale_32x/workload-1`, for the 64-GPU heterogeneous cluster scaled k
times (Figure 9: `--cluster sia-heterogeneous:32x`). `workload_artifact` says which artifact a name belongs to.
Every bad row stops the read with a `TraceError` naming the file, the line and the field, because a simulation on a
silently skipped job answers a different question than the one asked.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from pollux.data.locate import DATASET, SIA_DATASET, Artifact, find_data_dir, sia_scale_dir
from pollux.errors import DataNotFoundError, TraceError
from pollux.tenants import DEFAULT_TENANT

COLUMNS: tuple[str, ...] = ("name", "time", "application", "num_replicas", "batch_size")
TENANT_COLUMN = "tenant"  # optional: written only where some job belongs to a tenant other than the default
EXPERIMENT_COLUMNS: tuple[str, ...] = ("trials", "concurrency")  # optional: written only where a row is an experiment
WORKLOADS_FOLDER = "workloads"
DEFAULT_SET = "workloads"

SIA_WORKLOAD_SETS: tuple[str, ...] = ("philly", "saturn")  # saturn: SenseTime's Helios trace
# Sia's Figure 7 and 9 workloads, in `pollux.data.locate.sia_scale_dir`: `rate_10` … `rate_50`, `scale_2x` … `scale_32x`
SIA_SCALE_SET = re.compile(r"rate_\d+|scale_\d+x")

_ARTIFACT_NAME = re.compile(r"^(?:(?P<set>workloads[\w.\-]*)/)?(?P<name>workload-[\w.\-]+?)(?:\.csv)?$")
_SIA_NAME = re.compile(
    rf"^(?P<set>{'|'.join(SIA_WORKLOAD_SETS)}|{SIA_SCALE_SET.pattern})/(?P<name>workload-[\w.\-]+?)(?:\.csv)?$"
)


@dataclass(frozen=True)
class WorkloadJob:
    """One job of a workload: its submission time and the user's request (used by the fixed-size baselines)."""

    name: str
    submit_time_s: float  # an int when whole, as every artifact workload is: its results stay as they were
    application: str
    num_replicas: int
    batch_size: int
    tenant: str = DEFAULT_TENANT
    trials: int | None = None  # an experiment: this many trials of the application (None: one job)
    concurrency: int | None = None  # of which at most this many in the system at once

    @property
    def is_experiment(self) -> bool:
        return self.trials is not None or self.concurrency is not None


def experiment_problem(trials: int | None, concurrency: int | None) -> tuple[str, str] | None:
    """What is wrong with a row's `trials` and `concurrency`, as (field, "what it accepts, got what"); None when they
    describe an experiment (N >= 1 trials, 1 <= K <= N at a time) or a plain job (both absent)."""
    if trials is None and concurrency is None:
        return None
    if trials is None:
        return "trials", f"an integer >= 1 beside concurrency {concurrency} (or neither, for one job), got nothing"
    if trials < 1:
        return "trials", f"an integer >= 1, got {trials}"
    if concurrency is None:
        return "concurrency", f"an integer from 1 to trials ({trials}) beside it (or neither, for one job), got nothing"
    if not 1 <= concurrency <= trials:
        return "concurrency", f"an integer from 1 to trials ({trials}), got {concurrency}"
    return None


@dataclass(frozen=True)
class Workload:
    """Jobs in submission order (stable for equal times, so file order breaks ties) and where they came from."""

    name: str
    jobs: tuple[WorkloadJob, ...]
    source: Path | None = None

    def __post_init__(self) -> None:
        ordered = tuple(sorted(self.jobs, key=lambda job: job.submit_time_s))
        object.__setattr__(self, "jobs", ordered)

    def __len__(self) -> int:
        return len(self.jobs)


def workload_artifact(spec: str | Path) -> Artifact | None:
    """The artifact whose data an artifact name reads (`philly/workload-3`: "sia-sosp23"; `workload-1`:
    "pollux-osdi21"); None for an existing file or anything else taken as a path."""
    if Path(spec).expanduser().is_file():
        return None
    if _SIA_NAME.match(str(spec)):
        return SIA_DATASET
    if _ARTIFACT_NAME.match(str(spec)):
        return DATASET
    return None


def artifact_workload_names(data_dir: Path, artifact: Artifact = DATASET) -> tuple[str, ...]:
    """The artifact names readable from `data_dir`, as `read_workload` accepts them (shown when a name is wrong)."""
    root = Path(data_dir) / WORKLOADS_FOLDER
    if artifact == SIA_DATASET:
        paths = [p for folder in SIA_WORKLOAD_SETS for p in (root / folder).glob("workload-*.csv")]
        scale = sia_scale_dir(Path(data_dir))
        paths += [p for p in scale.glob("*/workload-*.csv") if SIA_SCALE_SET.fullmatch(p.parent.name)]
        return tuple(sorted((f"{p.parent.name}/{p.stem}" for p in paths), key=_natural))
    names = []
    for path in sorted(root.glob("workloads*/workload-*.csv")):
        folder = path.parent.name
        names.append(path.stem if folder == DEFAULT_SET else f"{folder}/{path.stem}")
    return tuple(sorted(names, key=lambda name: ("/" in name, name)))


def _natural(name: str) -> tuple[bool, list[str | int]]:
    """`philly/workload-10` after `philly/workload-9`, `scale_16x` after `scale_8x`, and the traces (philly, saturn)
    before the rate and scale sets."""
    parts: list[str | int] = [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]
    return name.split("/")[0] not in SIA_WORKLOAD_SETS, parts


def _known(names: tuple[str, ...]) -> str:
    """`names` for an error line, each run of consecutive numbers of a set as one `set/workload-1..10`."""
    runs: list[tuple[str, int, int]] = []  # (name less its number, first, last number)
    for name in names:
        head, _, number = name.rpartition("-")
        if not number.isdigit():
            runs.append((name, -1, -1))
        elif runs and runs[-1][0] == head + "-" and runs[-1][2] + 1 == int(number):
            runs[-1] = (runs[-1][0], runs[-1][1], int(number))
        else:
            runs.append((head + "-", int(number), int(number)))
    return ", ".join(
        head if first < 0 else f"{head}{first}" + (f"..{last}" if last > first else "") for head, first, last in runs
    )


def resolve_workload(spec: str | Path, data_dir: Path | None = None) -> tuple[str, Path]:
    """Turn a path or an artifact name into (workload name, CSV path); an existing file always wins over a name.

    `data_dir` is the data folder of the artifact the name belongs to (`workload_artifact`); None: found as
    `find_data_dir` does for that artifact."""
    path = Path(spec).expanduser()
    if path.is_file():
        return path.stem, path
    artifact = workload_artifact(spec)
    match = (_SIA_NAME if artifact == SIA_DATASET else _ARTIFACT_NAME).match(str(spec))
    if artifact is None or match is None:
        raise TraceError(
            f"{path}: workload file not found (nor is it an artifact name like workload-1 or philly/workload-3)"
        )
    try:
        root = find_data_dir(data_dir, artifact).path
    except DataNotFoundError as error:
        raise DataNotFoundError(f"workload {str(spec)!r} is an artifact name, but {error}") from error
    folder = match["set"] or DEFAULT_SET
    name = match["name"] if folder == DEFAULT_SET else f"{folder}/{match['name']}"
    sets = sia_scale_dir(root) if SIA_SCALE_SET.fullmatch(folder) else root / WORKLOADS_FOLDER
    candidate = sets / folder / f"{match['name']}.csv"
    if not candidate.is_file():
        known = _known(artifact_workload_names(root, artifact)) or "none"
        raise TraceError(f"{candidate}: no {artifact} workload {str(spec)!r}; known: {known}")
    return name, candidate


def read_workload(
    spec: str | Path, data_dir: Path | None = None, applications: Collection[str] | None = None
) -> Workload:
    """Read and validate a workload CSV given by path or artifact name.

    `applications`, when given, is the set of job types the caller can simulate: a row naming another one is an
    error listing them (None accepts any name, for callers that check later against their own catalog).
    """
    name, path = resolve_workload(spec, data_dir)
    known = None if applications is None else frozenset(applications)
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            jobs = _parse_rows(path, handle, known)
    except UnicodeDecodeError as error:
        raise TraceError(f"{path}: not a UTF-8 text file ({error.reason})") from None
    return Workload(name=name, jobs=jobs, source=path.resolve())


def write_workload(workload: Workload, path: str | Path) -> Path:
    """Write `workload` in the artifact's schema (readable back by `read_workload` and by the artifact's tools), with
    the `tenant` column only where some job belongs to a tenant other than the default, and `trials,concurrency` only
    where some row is an experiment (else the file is as before)."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    tenants = any(job.tenant != DEFAULT_TENANT for job in workload.jobs)
    experiments = any(job.is_experiment for job in workload.jobs)
    header = (*COLUMNS, *((TENANT_COLUMN,) if tenants else ()), *(EXPERIMENT_COLUMNS if experiments else ()))
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header)
        for job in workload.jobs:
            row: tuple[object, ...] = (job.name, job.submit_time_s, job.application, job.num_replicas, job.batch_size)
            if tenants:
                row += (job.tenant,)
            if experiments:
                row += tuple("" if value is None else value for value in (job.trials, job.concurrency))
            writer.writerow(row)
    return path


def _parse_rows(path: Path, handle: TextIO, applications: frozenset[str] | None) -> tuple[WorkloadJob, ...]:
    """Check the header, then every row; the first problem found is the one reported."""
    reader = csv.reader(handle)
    try:
        header = next(reader)
    except StopIteration:
        raise TraceError(f"{path}:1: empty file; expected the header {','.join(COLUMNS)}") from None
    except csv.Error as error:
        raise TraceError(f"{path}:1: unreadable header ({error})") from None
    header = [column.strip() for column in header]
    missing = [column for column in COLUMNS if column not in header]
    if missing:
        raise TraceError(
            f"{path}:1: missing column(s) {', '.join(missing)}; expected {','.join(COLUMNS)} (got {','.join(header)})"
        )
    optional = (TENANT_COLUMN, *EXPERIMENT_COLUMNS)
    index = {column: header.index(column) for column in (*COLUMNS, *optional) if column in header}
    jobs: list[WorkloadJob] = []
    first_line: dict[str, int] = {}
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as error:
            raise TraceError(f"{path}:{reader.line_num}: malformed row ({error})") from None
        line = reader.line_num
        if not any(field.strip() for field in row):
            continue
        job = _parse_row(path, line, row, header, index, applications)
        if job.name in first_line:
            raise TraceError(
                f"{path}:{line}: field 'name': duplicate job name {job.name!r} (first on line {first_line[job.name]})"
            )
        first_line[job.name] = line
        jobs.append(job)
    if not jobs:
        raise TraceError(f"{path}:2: no jobs after the header")
    return tuple(jobs)


def _parse_row(
    path: Path,
    line: int,
    row: list[str],
    header: list[str],
    index: dict[str, int],
    applications: frozenset[str] | None,
) -> WorkloadJob:
    """One row to a job, naming the first bad field and what it accepts."""
    if len(row) != len(header):
        absent = header[len(row) :] if len(row) < len(header) else []
        problem = f"missing field(s) {', '.join(absent)}" if absent else f"extra field(s) after {header[-1]}"
        raise TraceError(
            f"{path}:{line}: expected {len(header)} fields ({','.join(header)}), got {len(row)}: {problem}"
        )
    fields = {column: row[position].strip() for column, position in index.items()}
    if not fields["name"]:
        raise TraceError(f"{path}:{line}: field 'name': empty; every job needs a unique name")
    application = fields["application"]
    if not application:
        raise TraceError(f"{path}:{line}: field 'application': empty")
    if applications is not None and application not in applications:
        raise TraceError(
            f"{path}:{line}: field 'application': unknown application {application!r}; "
            f"known: {', '.join(sorted(applications))}"
        )
    tenant = fields.get(TENANT_COLUMN, DEFAULT_TENANT)
    if not tenant:
        raise TraceError(f"{path}:{line}: field 'tenant': empty; name the job's tenant (or drop the column)")
    submit_time_s = _seconds(path, line, fields["time"])
    num_replicas = _integer(path, line, "num_replicas", fields["num_replicas"], minimum=1)
    batch_size = _integer(path, line, "batch_size", fields["batch_size"], minimum=1)
    trials, concurrency = (
        _integer(path, line, column, fields[column], minimum=1) if fields.get(column) else None
        for column in EXPERIMENT_COLUMNS
    )
    wrong = experiment_problem(trials, concurrency)
    if wrong is not None:
        raise TraceError(f"{path}:{line}: field {wrong[0]!r}: expected {wrong[1]}")
    return WorkloadJob(
        name=fields["name"],
        submit_time_s=submit_time_s,
        application=application,
        num_replicas=num_replicas,
        batch_size=batch_size,
        tenant=tenant,
        trials=trials,
        concurrency=concurrency,
    )


def _integer(path: Path, line: int, field: str, text: str, minimum: int) -> int:
    """An integer field at or above `minimum` (seconds are whole, as in the artifacts' files; a whole number written
    as a float, `225.0`, as Sia's Helios traces write them, is that integer)."""
    accepted = "a non-negative integer" if minimum == 0 else f"an integer >= {minimum}"
    value: int | None
    try:
        value = int(text)
    except ValueError:
        value = _whole_float(text)
    if value is None:
        raise TraceError(f"{path}:{line}: field {field!r}: expected {accepted}, got {text!r}")
    if value < minimum:
        raise TraceError(f"{path}:{line}: field {field!r}: expected {accepted}, got {value}")
    return value


def _seconds(path: Path, line: int, text: str) -> float:
    """A submission time: non-negative seconds, whole (an int, `225.0` too) or with a fraction (`487.661836`)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise TraceError(
            f"{path}:{line}: field 'time': expected non-negative seconds (e.g. 487 or 487.66), got {text!r}"
        )
    return int(value) if value.is_integer() else value


def _whole_float(text: str) -> int | None:
    """`225.0` → 225; None for anything that is not a finite whole number."""
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if value.is_integer() else None
