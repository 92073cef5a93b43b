"""The state database's versioned schema: a state directory of every unversioned release opens with today's store,
keeps its jobs, and ends with exactly a fresh database's schema; one from a newer Pollux is refused in one line."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from unversioned_stores import RELEASES, Release, open_as

from pollux.errors import StateError
from pollux.runtime.launcher import WorkerInfo
from pollux.runtime.migrations import LATEST
from pollux.runtime.spec import JobSpec
from pollux.runtime.status import JobEvent
from pollux.runtime.store import JobSample, RoundRecord, StateStore

SPEC = {"name": "trained", "command": ["python", "train.py"], "init_batch_size": 32, "max_batch_size": 256}
REPORT = {"version": 1, "batch": {"total_batch_size": 64}}


def columns(path: Path, table: str) -> set[str]:
    with sqlite3.connect(path) as db:
        return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as db:
        return {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def fill(path: Path) -> tuple[set[str], set[str]]:
    """Two jobs as an unversioned scheduler left them: one trained after a crash, one training on two nodes. Returns
    the columns of `jobs` and the tables it filled."""
    jobs, has = columns(path, "jobs"), tables(path)
    db = sqlite3.connect(path)
    with db:
        db.execute(
            "INSERT INTO jobs (name, spec, status, submitted_at, updated_at, allocation, restarts, attempts, "
            "last_error) VALUES ('trained', ?, 'completed', 1.0, 9.0, '[]', 1, 1, NULL), "
            "('training', '{}', 'running', 2.0, 5.0, '[1, 1]', 0, 0, NULL)",
            (json.dumps(SPEC),),
        )
        if "cancel_requested" in jobs:
            db.execute("UPDATE jobs SET cancel_requested = 1 WHERE name = 'training'")
        if "reallocations" in jobs:
            db.execute("UPDATE jobs SET reallocations = 2 WHERE name = 'trained'")
        if "gpu_type" in jobs:
            db.execute("UPDATE jobs SET gpu_type = 'a100' WHERE name = 'training'")
        db.executemany(
            "INSERT INTO status_history VALUES (?, ?, ?, ?)",
            [("trained", 1.0, "pending", "submitted"), ("trained", 9.0, "completed", "exit 0")],
        )
        db.execute("INSERT INTO reports VALUES ('trained', 8.0, ?)", (json.dumps(REPORT),))
        db.executemany(
            "INSERT INTO events (at, job, kind, detail) VALUES (?, 'training', 'allocation', ?)",
            [(3.0, json.dumps({"allocation": [1, 1], "restart": False}))],
        )
        if "workers" in has:
            db.execute("INSERT INTO workers VALUES ('training', 0, 0, 4242, 'node-0', 77)")
        if "samples" in has:
            db.execute("INSERT INTO samples VALUES ('trained', 8.0, 2, 32, 0, 64, 120.0, 0.9)")
            db.execute("INSERT INTO rounds (at, gpus_in_use, jobs_running, jobs_pending) VALUES (8.0, 2, 1, 0)")
    db.close()
    return jobs, has


def schema(path: Path) -> list[tuple[str, str, str | None]]:
    with sqlite3.connect(path) as db:
        return sorted(db.execute("SELECT type, name, sql FROM sqlite_master"), key=lambda row: row[:2])


def fresh_schema(tmp_path: Path) -> list[tuple[str, str, str | None]]:
    path = tmp_path / "fresh" / "state.db"
    StateStore(path).close()
    return schema(path)


def check_migrated(path: Path, filled: tuple[set[str], set[str]], tmp_path: Path) -> None:
    """The filled jobs read back as `fill` left them, and the store works on as on a fresh database."""
    jobs, has = filled
    store = StateStore(path)
    trained, training = store.job("trained"), store.job("training")
    assert (trained.status, trained.spec, trained.restarts, trained.attempts) == ("completed", SPEC, 1, 1)
    assert trained.reallocations == (2 if "reallocations" in jobs else 0)
    assert (training.status, training.allocation) == ("running", (1, 1))
    assert training.cancel_requested == ("cancel_requested" in jobs)
    assert training.gpu_type == ("a100" if "gpu_type" in jobs else None)
    assert store.history("trained") == [(1.0, "pending", "submitted"), (9.0, "completed", "exit 0")]
    assert store.report("trained") == REPORT
    assert store.attained_service("training", now=5.0) == 4.0  # 2 GPUs since 3.0
    worker = WorkerInfo(0, 0, 4242, "node-0", 77)
    assert store.workers("training") == ([("training", worker)] if "workers" in has else [])
    assert store.samples("trained") == ([JobSample(8.0, 2, 32, 0, 64, 120.0, 0.9)] if "samples" in has else [])
    assert store.rounds() == ([RoundRecord(8.0, 2, 1, 0, ())] if "samples" in has else [])

    new = JobSpec(
        name="new", command=("python", "-c", "pass"), init_batch_size=32, max_batch_size=256, local_bsz_bounds=(8, 64)
    )
    store.add_job(new, now=10.0)
    store.record_launch("new", (2,), [WorkerInfo(0, 0, 99, "node-0", 1)], now=11.0, restart=False, gpu_type="v100")
    store.record_sample("new", JobSample(12.0, 2, 16, 0, 32, 50.0, 0.8))
    store.record_exit("training", JobEvent.CHECKPOINTED, now=12.0, reason="moved", reallocated=True)
    store.close()

    again = StateStore(path)
    assert [job.name for job in again.jobs()] == ["trained", "training", "new"]
    assert (again.job("new").status, again.job("new").gpu_type) == ("running", "v100")
    assert len(again.samples("new")) == 1
    assert again.job("training").reallocations == 1
    again.close()
    assert schema(path) == fresh_schema(tmp_path)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == LATEST
        assert db.execute("PRAGMA foreign_key_check").fetchall() == []
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.parametrize("release", RELEASES, ids=[release.commit for release in RELEASES])
def test_a_state_directory_of_every_unversioned_release_opens_with_its_jobs(tmp_path, release: Release):
    path = tmp_path / "state" / "state.db"
    path.parent.mkdir()
    open_as(release, path)
    check_migrated(path, fill(path), tmp_path)


def test_a_state_directory_opened_by_every_release_in_turn_opens_with_its_jobs(tmp_path):
    """The oldest user's database: created by the first store, then opened by each later release (so `jobs` never
    got `cancel_requested`, and got `reallocations` and `gpu_type` after its last column)."""
    path = tmp_path / "state" / "state.db"
    path.parent.mkdir()
    open_as(RELEASES[0], path)
    filled = fill(path)
    for release in RELEASES[1:]:
        open_as(release, path)
    assert "cancel_requested" not in columns(path, "jobs")
    check_migrated(path, filled, tmp_path)


def test_a_fresh_database_is_at_the_latest_version_and_reopening_changes_nothing(tmp_path):
    path = tmp_path / "state.db"
    StateStore(path).close()
    before = schema(path)
    StateStore(path).close()
    assert schema(path) == before
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == LATEST


def newer(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    StateStore(state / "state.db").close()
    with sqlite3.connect(state / "state.db") as db:
        db.execute(f"PRAGMA user_version = {LATEST + 1}")
    return state


def test_a_database_of_a_newer_pollux_is_refused_and_left_as_it_is(tmp_path):
    state = newer(tmp_path)
    before = schema(state / "state.db")
    with pytest.raises(StateError) as refused:
        StateStore(state / "state.db")
    message = str(refused.value)
    assert "\n" not in message and str(state) in message and "upgrade Pollux" in message, message
    assert f"version {LATEST + 1}" in message, message
    assert schema(state / "state.db") == before
    with sqlite3.connect(state / "state.db") as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == LATEST + 1


def test_pollux_ls_on_a_newer_database_says_so_in_one_line(tmp_path):
    state = newer(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "pollux", "ls", "--state-dir", str(state)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "upgrade Pollux" in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert str(state) in result.stderr.splitlines()[-1], result.stderr
