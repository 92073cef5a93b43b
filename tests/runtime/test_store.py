"""The SQLite state store: durable across reopen and across a kill -9 in the middle of a transaction."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from pollux.errors import SpecError, TransitionError, UnknownJobError
from pollux.runtime.launcher import WorkerInfo
from pollux.runtime.spec import JobSpec
from pollux.runtime.status import JobEvent
from pollux.runtime.store import StateStore


def spec(name: str) -> JobSpec:
    return JobSpec(
        name=name, command=("python", "-c", "pass"), init_batch_size=32, max_batch_size=256, local_bsz_bounds=(8, 64)
    )


def test_jobs_history_and_reports_survive_reopening(tmp_path):
    path = tmp_path / "state.db"
    store = StateStore(path)
    store.add_job(spec("a"), now=1.0)
    workers = [WorkerInfo(0, 0, 101, "h", 5), WorkerInfo(1, 0, 102, "h", 6)]
    store.record_launch("a", (2, 0), workers, now=2.0, restart=False)
    store.record_exit("a", JobEvent.CHECKPOINTED, now=3.0, reason="checkpointed to move to 2 GPU(s)")
    store.record_launch("a", (1, 1), workers[:1], now=3.0, restart=True)
    store.record_report("a", {"version": 1, "batch": {"total_batch_size": 64}}, now=3.5)
    store.close()

    again = StateStore(path)
    job = again.job("a")
    assert (job.status, job.allocation, job.restarts, job.attempts) == ("running", (1, 1), 1, 0)
    assert again.workers("a") == [("a", workers[0])]
    assert job.spec["local_bsz_bounds"] == [8, 64]
    assert [status for _, status, _ in again.history("a")] == ["pending", "running", "pending", "running"]
    assert again.report("a") == {"version": 1, "batch": {"total_batch_size": 64}}
    # GPU-seconds held: 2 GPUs for 1 s, then 2 GPUs from t=3 on
    assert again.attained_service("a", now=5.0) == pytest.approx(2 * 1.0 + 2 * 2.0)
    assert again._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_rounds_one_read_of_attained_service_agrees_with_each_jobs_own_and_leaves_out_finished_jobs(tmp_path):
    store = StateStore(tmp_path / "state.db")
    for name in ("a", "b", "done", "waiting"):
        store.add_job(spec(name), now=0.0)
    store.record_launch("a", (2, 0), [WorkerInfo(0, 0, 1, "h", 1)], now=1.0, restart=False)
    store.record_launch("b", (0, 1), [WorkerInfo(0, 1, 2, "h", 2)], now=2.0, restart=False)
    store.record_exit("b", JobEvent.CHECKPOINTED, now=4.0, reason="preempted")
    store.record_launch("done", (1, 0), [WorkerInfo(0, 0, 3, "h", 3)], now=1.0, restart=False)
    store.record_exit("done", JobEvent.FINISHED, now=3.0, reason="finished")
    everyone = store.attained_services(now=10.0)
    assert everyone == {"a": pytest.approx(18.0), "b": pytest.approx(2.0)}  # "waiting" never held a GPU
    assert {name: store.attained_service(name, now=10.0) for name in everyone} == everyone
    assert store.attained_service("done", now=10.0) == pytest.approx(2.0)


def test_a_crash_is_counted_with_its_exit_and_a_cancel_request_is_durable(tmp_path):
    store = StateStore(tmp_path / "state.db")
    store.add_job(spec("a"), now=0.0)
    store.record_launch("a", (1,), [WorkerInfo(0, 0, 7, "h", 1)], now=1.0, restart=False)
    store.record_exit("a", JobEvent.CRASHED, now=2.0, reason="crashed", error="exit 3\ntraceback", crashed=True)
    state = store.job("a")
    assert (state.status, state.attempts, state.last_error, state.allocation) == ("pending", 1, "exit 3\ntraceback", ())
    assert store.workers() == []
    assert not state.cancel_requested and store.request_cancel("a", now=3.0).cancel_requested
    store.close()
    assert StateStore(tmp_path / "state.db").job("a").cancel_requested


def test_duplicate_names_unknown_jobs_and_final_states_are_refused(tmp_path):
    store = StateStore(tmp_path / "state.db")
    store.add_job(spec("a"), now=0.0)
    with pytest.raises(SpecError, match="already used"):
        store.add_job(spec("a"), now=1.0)
    with pytest.raises(UnknownJobError, match="no job named 'zzz'"):
        store.job("zzz")
    with pytest.raises(UnknownJobError):
        store.record_launch("zzz", (1,), [], now=1.0, restart=False)
    store.record_launch("a", (1,), [], now=1.5, restart=False)
    store.record_exit("a", JobEvent.FINISHED, now=2.0, reason="done")
    with pytest.raises(SpecError, match="already completed"):
        store.record_exit("a", JobEvent.CHECKPOINTED, now=3.0, reason="late")
    with pytest.raises(SpecError, match="already completed"):
        store.record_launch("a", (1,), [], now=3.0, restart=True)
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


def test_a_database_of_an_earlier_version_gains_the_reallocation_count(tmp_path):
    path = tmp_path / "state.db"
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE jobs (name TEXT PRIMARY KEY, spec TEXT NOT NULL, status TEXT NOT NULL,"
        " submitted_at REAL NOT NULL, updated_at REAL NOT NULL, allocation TEXT NOT NULL DEFAULT '[]',"
        " restarts INTEGER NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0,"
        " cancel_requested INTEGER NOT NULL DEFAULT 0, last_error TEXT);"
    )
    old.close()
    store = StateStore(path)
    store.add_job(spec("a"), now=0.0)
    store.record_launch("a", (1,), [], now=1.0, restart=False)
    store.record_exit("a", JobEvent.CRASHED, now=2.0, reason="crashed", error="exit 3", crashed=True)
    store.record_launch("a", (1,), [], now=3.0, restart=True)
    store.record_exit("a", JobEvent.CHECKPOINTED, now=4.0, reason="checkpointed to move to 2 GPU(s)", reallocated=True)
    state = store.job("a")
    assert (state.restarts, state.reallocations, state.attempts) == (1, 1, 1)


def test_a_removed_job_frees_its_name_and_keeps_its_history_in_the_events(tmp_path):
    store = StateStore(tmp_path / "state.db")
    store.add_job(spec("a"), now=0.0)
    with pytest.raises(TransitionError, match=r"job 'a' is pending: cancel it first \(`pollux cancel a`\)"):
        store.remove_job("a", now=0.5)
    store.record_launch("a", (2,), [WorkerInfo(0, 0, 1, "h", 1)], now=1.0, restart=False)
    store.record_report("a", {"version": 1}, now=1.5)
    with pytest.raises(TransitionError, match="is running: cancel it first"):
        store.remove_job("a", now=1.5)
    store.record_exit("a", JobEvent.FINISHED, now=3.0, reason="finished")
    assert store.remove_job("a", now=4.0) == "completed"
    with pytest.raises(UnknownJobError):
        store.job("a")
    assert (store.history("a"), store.report("a"), store.jobs()) == ([], None, [])
    kinds = [event["kind"] for event in store.events() if event["job"] == "a"]
    assert kinds == ["submitted", "allocation", "allocation", "status", "removed"]  # the whole life, then its end
    removed = store.events()[-1]
    assert (removed["status"], removed["submitted_at"], removed["finished_at"], removed["restarts"]) == (
        "completed",
        0.0,
        3.0,
        0,
    )
    store.add_job(spec("a"), now=5.0)  # the name is free again, and the new job starts from nothing
    store.record_launch("a", (1,), [WorkerInfo(0, 0, 2, "h", 2)], now=6.0, restart=False)
    assert [event["kind"] for event in store.events("a")] == ["submitted", "allocation"]
    assert store.attained_service("a", now=8.0) == pytest.approx(2.0)  # not the old job's 4 GPU-seconds
    assert store.attained_services(now=8.0) == {"a": pytest.approx(2.0)}
    assert store.job("a").restarts == 0 and [s for _, s, _ in store.history("a")] == ["pending", "running"]
