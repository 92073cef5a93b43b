"""State databases as the releases before schema versioning wrote them (git history of pollux/runtime/store.py).

Each release ran `executescript(SCHEMA)` on open, and the later ones added the `jobs` columns a database missed by
`ALTER TABLE`; `open_as` does exactly that. The statements below are copied from those releases byte for byte
(SQLite keeps a table's text, so the spelling is part of the shape).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

JOBS_FIRST = """
CREATE TABLE IF NOT EXISTS jobs (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    status TEXT NOT NULL,
    submitted_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    allocation TEXT NOT NULL DEFAULT '[]',
    restarts INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT
);"""
JOBS_WITH_CANCEL = """
CREATE TABLE IF NOT EXISTS jobs (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    status TEXT NOT NULL,
    submitted_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    allocation TEXT NOT NULL DEFAULT '[]',
    restarts INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    last_error TEXT
);"""
JOBS_WITH_REALLOCATIONS = """
CREATE TABLE IF NOT EXISTS jobs (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    status TEXT NOT NULL,
    submitted_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    allocation TEXT NOT NULL DEFAULT '[]',
    restarts INTEGER NOT NULL DEFAULT 0,
    reallocations INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    last_error TEXT
);"""
HISTORY_AND_REPORTS = """
CREATE TABLE IF NOT EXISTS status_history (
    job TEXT NOT NULL REFERENCES jobs(name),
    at REAL NOT NULL,
    status TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS reports (
    job TEXT PRIMARY KEY REFERENCES jobs(name),
    at REAL NOT NULL,
    report TEXT NOT NULL
);"""
WORKERS = """
CREATE TABLE IF NOT EXISTS workers (
    job TEXT NOT NULL REFERENCES jobs(name),
    rank INTEGER NOT NULL,
    node INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    start_ticks INTEGER NOT NULL,
    PRIMARY KEY (job, rank)
);"""
EVENTS = """
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    job TEXT,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '{}'
);"""
ROUNDS_AND_SAMPLES = """
CREATE TABLE IF NOT EXISTS rounds (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    gpus_in_use INTEGER NOT NULL,
    jobs_running INTEGER NOT NULL,
    jobs_pending INTEGER NOT NULL,
    decisions TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS samples (
    job TEXT NOT NULL REFERENCES jobs(name),
    at REAL NOT NULL,
    gpus INTEGER NOT NULL,
    local_bsz INTEGER NOT NULL,
    accum_steps INTEGER NOT NULL,
    batch_size INTEGER NOT NULL,
    goodput REAL,
    efficiency REAL
);
CREATE INDEX IF NOT EXISTS samples_by_job ON samples (job, at);"""
ADD_REALLOCATIONS = "ALTER TABLE jobs ADD COLUMN reallocations INTEGER NOT NULL DEFAULT 0"
ADD_GPU_TYPE = "ALTER TABLE jobs ADD COLUMN gpu_type TEXT"


@dataclass(frozen=True)
class Release:
    """What one release's `StateStore.__init__` ran on a database: its script, then the columns it added."""

    commit: str
    schema: str
    adds: tuple[tuple[str, str], ...] = ()  # (column, ALTER TABLE statement), run where `jobs` lacks the column


RELEASES = (
    Release("553541b", JOBS_FIRST + HISTORY_AND_REPORTS + EVENTS),  # the first store
    Release("a5f620c", JOBS_FIRST + HISTORY_AND_REPORTS + WORKERS + EVENTS),  # workers' pids
    Release("4d32a07", JOBS_WITH_CANCEL + HISTORY_AND_REPORTS + WORKERS + EVENTS),  # durable cancels
    Release(  # Pollux's R (re-allocations)
        "d150ce4",
        JOBS_WITH_REALLOCATIONS + HISTORY_AND_REPORTS + WORKERS + EVENTS,
        (("reallocations", ADD_REALLOCATIONS),),
    ),
    Release(  # GPU types (branch h18-runtime, before the dashboard's tables)
        "c516e7c",
        JOBS_WITH_REALLOCATIONS + HISTORY_AND_REPORTS + WORKERS + EVENTS,
        (("reallocations", ADD_REALLOCATIONS), ("gpu_type", ADD_GPU_TYPE)),
    ),
    Release(  # the dashboard's rounds and samples (its branch, before GPU types)
        "a4b1649",
        JOBS_WITH_REALLOCATIONS + HISTORY_AND_REPORTS + WORKERS + EVENTS + ROUNDS_AND_SAMPLES,
        (("reallocations", ADD_REALLOCATIONS),),
    ),
    Release(  # both merged: the last unversioned store
        "b0bb044",
        JOBS_WITH_REALLOCATIONS + HISTORY_AND_REPORTS + WORKERS + EVENTS + ROUNDS_AND_SAMPLES,
        (("reallocations", ADD_REALLOCATIONS), ("gpu_type", ADD_GPU_TYPE)),
    ),
)


def open_as(release: Release, path: Path) -> None:
    """Open (or create) the database at `path` as `release` did."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA foreign_keys=ON")
        db.executescript(release.schema)
        columns = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
        for column, statement in release.adds:
            if column not in columns:
                db.execute(statement)
    finally:
        db.close()
