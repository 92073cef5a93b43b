"""Durable runtime state in SQLite (WAL mode): jobs, their status history, allocations, agent reports, events, and
the history the dashboard draws (each round's decisions and the cluster's use; each job's goodput over time).

Every change is one transaction, so a scheduler killed at any instant leaves the last committed state intact, and a
restarted one reads every job back. Only what cannot be recomputed is stored (docs/design.md, "The runtime"). The
schema is versioned; opening a database of an earlier version migrates it (`pollux.runtime.migrations`).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pollux.agent.metrics import MetricRecord
from pollux.agent.report import JobReport
from pollux.errors import ReportError, SpecError, UnknownJobError
from pollux.runtime.launcher import WorkerInfo
from pollux.runtime.migrations import migrate
from pollux.runtime.spec import JobSpec
from pollux.runtime.status import FINAL, JobEvent, JobStatus, check_removable, next_status

_ACTIVE = "WHERE status NOT IN ({})".format(", ".join(f"'{status.value}'" for status in sorted(FINAL)))
# an event of the job that now holds its name, not of a removed job that held it before (`remove_job`)
_CURRENT = "id > COALESCE((SELECT MAX(r.id) FROM events r WHERE r.job = events.job AND r.kind = 'removed'), 0)"


@dataclass(frozen=True)
class RoundRecord:
    """One scheduling round as the dashboard shows it: what it decided and how busy the cluster was after it."""

    at: float
    gpus_in_use: int
    jobs_running: int
    jobs_pending: int
    decisions: tuple[dict[str, Any], ...]  # {"job", "kind": start|resize|stop, "gpus_from", "gpus_to", "allocation"}


@dataclass(frozen=True)
class JobSample:
    """A job's batch and goodput when its agent reported (m, s, M: per-GPU batch, accumulation steps, total)."""

    at: float
    gpus: int
    local_bsz: int
    accum_steps: int
    batch_size: int
    goodput: float | None
    efficiency: float | None


@dataclass(frozen=True)
class JobState:
    """One job as stored."""

    name: str
    spec: dict[str, Any]
    status: JobStatus
    submitted_at: float
    updated_at: float
    allocation: tuple[int, ...]
    restarts: int  # launches after the first, whatever the cause
    reallocations: int  # allocation changes a round made (resizes, preemptions): Pollux's R, as the simulator counts
    attempts: int  # crashed launches so far (the retry limit counts these)
    cancel_requested: bool  # a user cancelled it; the scheduler has not yet stopped it
    last_error: str | None
    gpu_type: str | None = None  # the GPU type of its current (else last) allocation


def _spec_json(spec: JobSpec) -> str:
    return json.dumps(spec.to_json_dict(), sort_keys=True)


class StateStore:
    """The scheduler's state in one SQLite file. Safe to share between threads of one process."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        migrate(self._db, self.path)
        self._db.execute("PRAGMA foreign_keys=ON")
        # A job's spec never changes once submitted: decoded once per (name, submission), not at every read of the
        # jobs (a round over 2,000 pending jobs spent most of its time decoding their specs). Shared: not to mutate.
        self._specs: dict[tuple[str, float], dict[str, Any]] = {}

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """All statements inside commit together or not at all."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # -- jobs ----------------------------------------------------------------------------------------------------
    def add_job(self, spec: JobSpec, now: float) -> JobState:
        """Record a submitted job as pending; a name the store already holds is refused."""
        with self.transaction() as db:
            row = db.execute("SELECT status FROM jobs WHERE name = ?", (spec.name,)).fetchone()
            if row is not None:
                raise SpecError(f"job name {spec.name!r} is already used (status {row['status']}); pick another name")
            db.execute(
                "INSERT INTO jobs (name, spec, status, submitted_at, updated_at) VALUES (?, ?, 'pending', ?, ?)",
                (spec.name, _spec_json(spec), now, now),
            )
            db.execute("INSERT INTO status_history VALUES (?, ?, 'pending', 'submitted')", (spec.name, now))
            _event(db, now, spec.name, "submitted", {})
        return self.job(spec.name)

    def job(self, name: str) -> JobState:
        with self._lock:
            row = self._db.execute("SELECT * FROM jobs WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise UnknownJobError(f"no job named {name!r}; `pollux ls` lists the jobs")
        return self._state(row)

    def jobs(self, include_finished: bool = True) -> list[JobState]:
        query = "SELECT * FROM jobs {} ORDER BY submitted_at, name".format("" if include_finished else _ACTIVE)
        with self._lock:
            rows = self._db.execute(query).fetchall()
        return [self._state(r) for r in rows]

    def request_cancel(self, name: str, now: float) -> JobState:
        """Remember that the user cancelled the job (durably: a scheduler restarted before it acted still does)."""
        with self.transaction() as db:
            current = self._status(db, name)
            if current not in FINAL:
                db.execute("UPDATE jobs SET cancel_requested = 1, updated_at = ? WHERE name = ?", (now, name))
                _event(db, now, name, "cancel requested", {})
        return self.job(name)

    def remove_job(self, name: str, now: float) -> JobStatus:
        """Forget a finished job so that its name can be used again, and return its final status. Its rows go from
        every table but `events`, which keeps its history and gains a `removed` event with its final state; the
        events before it are no longer the name's (`_CURRENT`)."""
        with self.transaction() as db:
            row = db.execute("SELECT * FROM jobs WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise UnknownJobError(f"no job named {name!r}; `pollux ls` lists the jobs")
            state = self._state(row)
            check_removable(name, state.status)
            for table in ("status_history", "reports", "samples", "workers", "metrics"):
                db.execute(f"DELETE FROM {table} WHERE job = ?", (name,))
            db.execute("DELETE FROM jobs WHERE name = ?", (name,))
            final = {
                "status": state.status.value,
                "submitted_at": state.submitted_at,
                "finished_at": state.updated_at,
                "restarts": state.restarts,
                "last_error": state.last_error,
            }
            _event(db, now, name, "removed", final)
        return state.status

    def record_launch(
        self,
        name: str,
        allocation: tuple[int, ...],
        workers: list[WorkerInfo],
        now: float,
        restart: bool,
        gpu_type: str | None = None,
    ) -> None:
        """A worker group started: status running, its allocation and its workers' pids, in one transaction (a
        scheduler killed right after still knows which processes to reap)."""
        with self.transaction() as db:
            current = self._status(db, name)
            status = next_status(current, JobEvent.LAUNCHED, name)
            db.execute("DELETE FROM workers WHERE job = ?", (name,))
            db.executemany(
                "INSERT INTO workers VALUES (?, ?, ?, ?, ?, ?)",
                [(name, w.rank, w.node, w.pid, w.host, w.start_ticks) for w in workers],
            )
            db.execute(
                "UPDATE jobs SET status = ?, allocation = ?, updated_at = ?, restarts = restarts + ?, gpu_type = ? "
                "WHERE name = ?",
                (status, json.dumps(list(allocation)), now, int(restart), gpu_type, name),
            )
            db.execute("INSERT INTO status_history VALUES (?, ?, ?, ?)", (name, now, status, "launched"))
            detail = {"allocation": list(allocation), "restart": restart, "gpu_type": gpu_type}
            _event(db, now, name, "allocation", detail)

    def set_allocation(self, name: str, allocation: tuple[int, ...]) -> None:
        """A running job's allocation renumbered (the node pool changed under it; the same GPUs, so no event)."""
        with self.transaction() as db:
            db.execute("UPDATE jobs SET allocation = ? WHERE name = ?", (json.dumps(list(allocation)), name))

    def record_exit(
        self,
        name: str,
        event: JobEvent,
        now: float,
        reason: str,
        error: str | None = None,
        crashed: bool = False,
        reallocated: bool = False,
    ) -> None:
        """A worker group is gone (or never started): the job holds no GPUs and no workers and its status follows
        `event` (`pollux.runtime.status`); `crashed` counts one more crashed attempt, `reallocated` one more
        re-allocation (a round stopped it to move or preempt it). A completed job keeps no error of an earlier
        attempt (its history still tells of the crash). One transaction; a finished job never changes again."""
        with self.transaction() as db:
            current = self._status(db, name)
            status = next_status(current, event, name)
            db.execute("DELETE FROM workers WHERE job = ?", (name,))
            db.execute(
                "UPDATE jobs SET status = ?, allocation = '[]', updated_at = ?, "
                "last_error = CASE WHEN ? = 'completed' THEN NULL ELSE COALESCE(?, last_error) END, "
                "attempts = attempts + ?, reallocations = reallocations + ? WHERE name = ?",
                (status, now, status, error, int(crashed), int(reallocated), name),
            )
            db.execute("INSERT INTO status_history VALUES (?, ?, ?, ?)", (name, now, status, reason))
            _event(db, now, name, "allocation", {"allocation": [], "restart": False})
            _event(db, now, name, "status", {"from": current, "to": status, "reason": reason})

    def workers(self, name: str | None = None) -> list[tuple[str, WorkerInfo]]:
        """Recorded live workers (job, worker), of one job or of all."""
        query, args = "SELECT * FROM workers ORDER BY job, rank", cast(tuple[str, ...], ())
        if name is not None:
            query, args = "SELECT * FROM workers WHERE job = ? ORDER BY rank", (name,)
        with self._lock:
            rows = self._db.execute(query, args).fetchall()
        return [(r["job"], WorkerInfo(r["rank"], r["node"], r["pid"], r["host"], r["start_ticks"])) for r in rows]

    def attained_service(self, name: str, now: float) -> float:
        """GPU-seconds the job has held so far, from its allocation events (Tiresias' 2D attained service)."""
        return self._attained("job = ?", (name,), now).get(name, 0.0)

    def attained_services(self, now: float) -> dict[str, float]:
        """`attained_service` of every unfinished job that has held GPUs, in one read (a round asks every job)."""
        return self._attained(f"job IN (SELECT name FROM jobs {_ACTIVE})", (), now)

    def _attained(self, which: str, args: tuple[str, ...], now: float) -> dict[str, float]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT job, at, detail FROM events WHERE kind = 'allocation' AND {which} AND {_CURRENT} ORDER BY id",
                args,
            ).fetchall()
        return _gpu_seconds(rows, now)

    # -- reports, history, events ---------------------------------------------------------------------------
    def record_report(self, name: str, report: dict[str, Any], now: float) -> None:
        with self.transaction() as db:
            self._status(db, name)
            db.execute(
                "INSERT INTO reports VALUES (?, ?, ?) ON CONFLICT(job) DO UPDATE SET at = excluded.at, "
                "report = excluded.report",
                (name, now, json.dumps(report, sort_keys=True)),
            )

    def record_sample(self, name: str, sample: JobSample) -> None:
        """One point of the job's goodput/batch history (the service adds one per new agent report)."""
        with self.transaction() as db:
            self._status(db, name)
            db.execute(
                "INSERT INTO samples VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    name,
                    sample.at,
                    sample.gpus,
                    sample.local_bsz,
                    sample.accum_steps,
                    sample.batch_size,
                    sample.goodput,
                    sample.efficiency,
                ),
            )

    def samples(self, name: str, limit: int = 2000) -> list[JobSample]:
        """The job's last `limit` samples, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM (SELECT * FROM samples WHERE job = ? ORDER BY at DESC LIMIT ?) ORDER BY at",
                (name, limit),
            ).fetchall()
        return [
            JobSample(
                r["at"], r["gpus"], r["local_bsz"], r["accum_steps"], r["batch_size"], r["goodput"], r["efficiency"]
            )
            for r in rows
        ]

    def record_metrics(self, name: str, records: list[tuple[int, MetricRecord]]) -> None:
        """Lines of the job's metrics file as (position in the file, record); a position stored already is kept as
        it was (a restarted service reads the file from its start again)."""
        with self.transaction() as db:
            self._status(db, name)
            db.executemany(
                "INSERT OR IGNORE INTO metrics VALUES (?, ?, ?, ?, ?)",
                [(name, seq, r.at, r.step, json.dumps(r.metrics, sort_keys=True)) for seq, r in records],
            )

    def metrics(self, name: str, after: int = -1) -> list[tuple[int, MetricRecord]]:
        """The job's metrics past position `after`, in the order written."""
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM metrics WHERE job = ? AND seq > ? ORDER BY seq", (name, after)
            ).fetchall()
        return [(r["seq"], MetricRecord(r["at"], r["step"], json.loads(r["metrics"]))) for r in rows]

    def record_round(self, record: RoundRecord) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO rounds (at, gpus_in_use, jobs_running, jobs_pending, decisions) VALUES (?, ?, ?, ?, ?)",
                (
                    record.at,
                    record.gpus_in_use,
                    record.jobs_running,
                    record.jobs_pending,
                    json.dumps(list(record.decisions)),
                ),
            )

    def rounds(self, limit: int = 500) -> list[RoundRecord]:
        """The last `limit` rounds, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM (SELECT * FROM rounds ORDER BY id DESC LIMIT ?) ORDER BY id", (limit,)
            ).fetchall()
        return [
            RoundRecord(
                r["at"], r["gpus_in_use"], r["jobs_running"], r["jobs_pending"], tuple(json.loads(r["decisions"]))
            )
            for r in rows
        ]

    def report(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT report FROM reports WHERE job = ?", (name,)).fetchone()
        return None if row is None else json.loads(row["report"])

    def report_of(self, name: str) -> JobReport | None:
        """The job's last stored agent report, or None (none yet, or one this version cannot read)."""
        stored = self.report(name)
        if stored is None:
            return None
        try:
            return JobReport.from_json_dict(stored, f"stored report of {name}")
        except ReportError:
            return None

    def history(self, name: str) -> list[tuple[float, str, str]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT at, status, reason FROM status_history WHERE job = ? ORDER BY rowid", (name,)
            ).fetchall()
        return [(r["at"], r["status"], r["reason"]) for r in rows]

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """Every event, or those of the job that now holds `name` (a removed job's stay in the first list)."""
        query, args = "SELECT * FROM events ORDER BY id", cast(tuple[str, ...], ())
        if name is not None:
            query, args = f"SELECT * FROM events WHERE job = ? AND {_CURRENT} ORDER BY id", (name,)
        with self._lock:
            rows = self._db.execute(query, args).fetchall()
        return [{"at": r["at"], "job": r["job"], "kind": r["kind"], **json.loads(r["detail"])} for r in rows]

    # -- helpers --------------------------------------------------------------------------------------------
    @staticmethod
    def _status(db: sqlite3.Connection, name: str) -> JobStatus:
        row = db.execute("SELECT status FROM jobs WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise UnknownJobError(f"no job named {name!r}; `pollux ls` lists the jobs")
        return JobStatus(row["status"])

    def _state(self, row: sqlite3.Row) -> JobState:
        key = (row["name"], row["submitted_at"])
        spec = self._specs.get(key)
        if spec is None:
            spec = self._specs[key] = json.loads(row["spec"])
        return _job_state(row, spec)


def _job_state(row: sqlite3.Row, spec: dict[str, Any]) -> JobState:
    return JobState(
        name=row["name"],
        spec=spec,
        status=JobStatus(row["status"]),
        submitted_at=row["submitted_at"],
        updated_at=row["updated_at"],
        allocation=tuple(json.loads(row["allocation"])),
        restarts=row["restarts"],
        reallocations=row["reallocations"],
        gpu_type=row["gpu_type"],
        attempts=row["attempts"],
        cancel_requested=bool(row["cancel_requested"]),
        last_error=row["last_error"],
    )


def _event(db: sqlite3.Connection, now: float, job: str | None, kind: str, detail: dict[str, Any]) -> None:
    db.execute("INSERT INTO events (at, job, kind, detail) VALUES (?, ?, ?, ?)", (now, job, kind, json.dumps(detail)))


def _gpu_seconds(allocation_events: list[sqlite3.Row], now: float) -> dict[str, float]:
    """GPU-seconds each job has held by `now`, from its allocation events in order."""
    held: dict[str, tuple[float, float, int]] = {}  # job -> (GPU-seconds so far, since when, GPUs since then)
    for row in allocation_events:
        total, since, gpus = held.get(row["job"], (0.0, 0.0, 0))
        allocation = json.loads(row["detail"])["allocation"]
        held[row["job"]] = (total + gpus * (row["at"] - since), row["at"], sum(allocation))
    return {job: total + gpus * max(now - since, 0.0) for job, (total, since, gpus) in held.items()}
