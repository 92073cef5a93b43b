"""The SQLite state store: durable across reopen and across a kill -9 in the middle of a transaction."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from pollux.errors import SpecError, UnknownJobError
from pollux.runtime.spec import JobSpec
from pollux.runtime.store import StateStore


def spec(name: str) -> JobSpec:
    return JobSpec(
        name=name, command=("python", "-c", "pass"), init_batch_size=32, max_batch_size=256, local_bsz_bounds=(8, 64)
    )


def test_jobs_history_and_reports_survive_reopening(tmp_path):
    path = tmp_path / "state.db"
    store = StateStore(path)
    store.add_job(spec("a"), now=1.0)
    store.set_status("a", "running", now=2.0, reason="allocated 2 GPUs")
    store.set_allocation("a", (2, 0), now=2.0, restart=False)
    store.set_allocation("a", (1, 1), now=3.0, restart=True)
    store.record_report("a", {"version": 1, "batch": {"total_batch_size": 64}}, now=3.5)
    store.close()

    again = StateStore(path)
    job = again.job("a")
    assert (job.status, job.allocation, job.restarts) == ("running", (1, 1), 1)
    assert job.spec["local_bsz_bounds"] == [8, 64]
    assert [status for _, status, _ in again.history("a")] == ["pending", "running"]
    assert again.report("a") == {"version": 1, "batch": {"total_batch_size": 64}}
    assert [e["kind"] for e in again.events("a")] == ["submitted", "status", "allocation", "allocation"]
    assert again._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_duplicate_names_unknown_jobs_and_final_states_are_refused(tmp_path):
    store = StateStore(tmp_path / "state.db")
    store.add_job(spec("a"), now=0.0)
    with pytest.raises(SpecError, match="already used"):
        store.add_job(spec("a"), now=1.0)
    with pytest.raises(UnknownJobError, match="no job named 'zzz'"):
        store.job("zzz")
    with pytest.raises(UnknownJobError):
        store.set_status("zzz", "running", now=1.0)
    store.set_status("a", "completed", now=2.0)
    with pytest.raises(SpecError, match="already completed"):
        store.set_status("a", "running", now=3.0)
    assert [j.name for j in store.jobs(include_finished=False)] == []


def test_a_failed_transaction_changes_nothing(tmp_path):
    store = StateStore(tmp_path / "state.db")
    store.add_job(spec("a"), now=0.0)
    with pytest.raises(RuntimeError), store.transaction() as db:
        db.execute("UPDATE jobs SET status = 'running' WHERE name = 'a'")
        raise RuntimeError("crash between two statements")
    assert store.job("a").status == "pending"


def test_kill_9_in_the_middle_of_a_transaction_keeps_the_last_committed_state(tmp_path):
    path = tmp_path / "state.db"
    marker = tmp_path / "inside"
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from pollux.runtime.spec import JobSpec
        from pollux.runtime.store import StateStore
        store = StateStore({str(path)!r})
        store.add_job(JobSpec("kept", ("python",), 32, 256, (8, 64)), now=1.0)
        with store.transaction() as db:
            db.execute("INSERT INTO jobs (name, spec, status, submitted_at, updated_at) "
                       "VALUES ('lost', '{{}}', 'pending', 2, 2)")
            db.execute("UPDATE jobs SET status = 'running' WHERE name = 'kept'")
            Path({str(marker)!r}).touch()
            time.sleep(60)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert process.poll() is None and time.monotonic() < deadline, "child died before its transaction"
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()

    store = StateStore(path)
    assert [j.name for j in store.jobs()] == ["kept"]
    assert store.job("kept").status == "pending"
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
