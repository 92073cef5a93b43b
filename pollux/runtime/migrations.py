"""The state database's schema, versioned: `PRAGMA user_version` says how many of `MIGRATIONS` a database has had,
and opening it runs the missing ones in one transaction. A fresh database takes the same path from version 0, so
every database of one Pollux version has one schema, whichever version created it.

Version 1 is whatever shape an unversioned database has, made current. Before versioning, the store created its
tables with `CREATE TABLE IF NOT EXISTS` and gave `jobs` the columns it missed by `ALTER TABLE`, so the databases
users have come in several shapes (git history of pollux/runtime/store.py): tables were only ever added (`workers`,
then `rounds` and `samples`), and `jobs` only ever gained columns with defaults (`cancel_requested`,
`reallocations`, `gpu_type`), in place or, where an older database got them by `ALTER TABLE`, after its last
column. So version 1 creates the tables a database lacks and rebuilds `jobs` in its own shape, keeping the columns
it finds; the others take their defaults (no cancel requested, no re-allocations, no GPU type). Detecting the shape
is version 1's job alone: every later step starts from one known schema.

A later change is one more step at the end of `MIGRATIONS`, a function of the connection that runs the SQL bringing
version N-1 to N (foreign keys off and `legacy_alter_table` on, as SQLite's procedure for changing a table asks); a
released step is never edited. A database of a version above the last step was written by a newer Pollux and is
refused.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from pollux.errors import StateError

VERSION_1 = """
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
    last_error TEXT,
    gpu_type TEXT
);
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
);
CREATE TABLE IF NOT EXISTS workers (
    job TEXT NOT NULL REFERENCES jobs(name),
    rank INTEGER NOT NULL,
    node INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    start_ticks INTEGER NOT NULL,
    PRIMARY KEY (job, rank)
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    job TEXT,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '{}'
);
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
CREATE INDEX IF NOT EXISTS samples_by_job ON samples (job, at);
"""
# Every table but `jobs` is spelled as the unversioned releases spelled it, byte for byte: SQLite keeps the text of
# a table it does not rebuild, and a migrated database must have the same schema as a fresh one.

Migration = Callable[[sqlite3.Connection], None]


def _statements(script: str) -> list[str]:
    """A script's statements, one by one: `executescript` would commit the migration's transaction half-way."""
    return [statement for statement in script.split(";") if statement.strip()]


def adopt_unversioned(db: sqlite3.Connection) -> None:
    """Version 1 from any unversioned shape (or from nothing): the missing tables created, `jobs` rebuilt."""
    columns = ", ".join(f'"{row[1]}"' for row in db.execute("PRAGMA table_info(jobs)"))
    if columns:  # renamed aside, so that version 1's own CREATE TABLE text makes the new one
        db.execute("ALTER TABLE jobs RENAME TO jobs_unversioned")
    for statement in _statements(VERSION_1):
        db.execute(statement)
    if columns:
        db.execute(f"INSERT INTO jobs ({columns}) SELECT {columns} FROM jobs_unversioned")
        db.execute("DROP TABLE jobs_unversioned")


def index_job_lookups(db: sqlite3.Connection) -> None:
    """Version 2: what a round reads per job (its allocation events, its status history) by index, not by a scan of
    every job's rows (a round over 2,000 pending jobs read the whole events table 2,000 times)."""
    db.execute("CREATE INDEX events_by_job ON events (job, kind, id)")
    db.execute("CREATE INDEX status_history_by_job ON status_history (job)")


def add_tenant_tokens(db: sqlite3.Connection) -> None:
    """Version 3: the tenants' tokens, each kept only as its sha256 (`pollux.runtime.tokens`), one per tenant."""
    db.execute(
        "CREATE TABLE tenant_tokens "
        "(tenant TEXT PRIMARY KEY, token_sha256 TEXT NOT NULL UNIQUE, created_at REAL NOT NULL)"
    )


def add_metrics(db: sqlite3.Connection) -> None:
    """Version 4: the training scripts' own metrics (`pollux.agent.metrics`), one row per line of a job's metrics
    file, numbered by its position there (`seq`): read again after a restart, a line is not stored twice."""
    db.execute(
        "CREATE TABLE metrics (job TEXT NOT NULL REFERENCES jobs(name), seq INTEGER NOT NULL, at REAL NOT NULL, "
        "step INTEGER, metrics TEXT NOT NULL, PRIMARY KEY (job, seq))"
    )


MIGRATIONS: tuple[Migration, ...] = (adopt_unversioned, index_job_lookups, add_tenant_tokens, add_metrics)
LATEST = len(MIGRATIONS)


def schema_version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def migrate(db: sqlite3.Connection, path: Path) -> None:
    """Bring the database at `path` (opened on `db` in autocommit mode) to `LATEST`, or refuse one that a newer
    Pollux wrote. A database already current costs one read."""
    if schema_version(db) < LATEST:
        _run_missing(db)
    version = schema_version(db)
    if version > LATEST:
        raise StateError(
            f"{path.parent}: its state database {path.name} has schema version {version}, written by a newer Pollux "
            f"than this one (which reads up to version {LATEST}); upgrade Pollux to use this state directory"
        )


def _run_missing(db: sqlite3.Connection) -> None:
    """The steps the database lacks, in one transaction."""
    # Rebuilding `jobs` in place: other tables' references to it must neither be checked half-way nor follow the
    # rename (SQLite's procedure for changing a table, sqlite.org/lang_altertable.html). Both pragmas are no-ops
    # inside a transaction, hence set around it.
    foreign_keys = db.execute("PRAGMA foreign_keys").fetchone()[0]
    db.execute("PRAGMA foreign_keys=OFF")
    db.execute("PRAGMA legacy_alter_table=ON")
    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            version = schema_version(db)  # read again under the lock: another process may have migrated it meanwhile
            if version < LATEST:
                for step in MIGRATIONS[version:]:
                    step(db)
                db.execute(f"PRAGMA user_version = {LATEST}")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
    finally:
        db.execute("PRAGMA legacy_alter_table=OFF")
        db.execute(f"PRAGMA foreign_keys={foreign_keys}")
