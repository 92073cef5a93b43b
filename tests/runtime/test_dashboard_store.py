"""The history the dashboard draws: rounds and goodput samples survive reopening, and an older database opens."""

from __future__ import annotations

import sqlite3

from pollux.dashboard.sessions import LINK_TTL_S, Sessions
from pollux.runtime.spec import JobSpec
from pollux.runtime.store import JobSample, RoundRecord, StateStore

# The state database as the runtime wrote it before the dashboard: no rounds, no samples.
OLD_SCHEMA = """
CREATE TABLE jobs (name TEXT PRIMARY KEY, spec TEXT NOT NULL, status TEXT NOT NULL, submitted_at REAL NOT NULL,
    updated_at REAL NOT NULL, allocation TEXT NOT NULL DEFAULT '[]', restarts INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0, cancel_requested INTEGER NOT NULL DEFAULT 0, last_error TEXT);
CREATE TABLE status_history (job TEXT NOT NULL REFERENCES jobs(name), at REAL NOT NULL, status TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '');
CREATE TABLE reports (job TEXT PRIMARY KEY REFERENCES jobs(name), at REAL NOT NULL, report TEXT NOT NULL);
CREATE TABLE workers (job TEXT NOT NULL REFERENCES jobs(name), rank INTEGER NOT NULL, node INTEGER NOT NULL,
    pid INTEGER NOT NULL, host TEXT NOT NULL, start_ticks INTEGER NOT NULL, PRIMARY KEY (job, rank));
CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, job TEXT, kind TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '{}');
INSERT INTO jobs (name, spec, status, submitted_at, updated_at) VALUES ('old', '{}', 'completed', 1.0, 2.0);
"""


def spec(name: str) -> JobSpec:
    return JobSpec(
        name=name, command=("python", "-c", "pass"), init_batch_size=32, max_batch_size=256, local_bsz_bounds=(8, 64)
    )


def test_rounds_and_samples_survive_reopening_oldest_first(tmp_path):
    path = tmp_path / "state.db"
    store = StateStore(path)
    store.add_job(spec("a"), now=1.0)
    decision = {"job": "a", "kind": "start", "gpus_from": 0, "gpus_to": 2, "allocation": [2]}
    store.record_round(RoundRecord(2.0, 2, 1, 0, (decision,)))
    store.record_round(RoundRecord(3.0, 2, 1, 0, ()))
    store.record_sample("a", JobSample(2.5, 2, 16, 0, 32, 120.0, 0.9))
    store.record_sample("a", JobSample(3.5, 2, 32, 1, 128, 150.0, 0.7))
    store.close()

    again = StateStore(path)
    assert again.rounds() == [RoundRecord(2.0, 2, 1, 0, (decision,)), RoundRecord(3.0, 2, 1, 0, ())]
    assert [r.at for r in again.rounds(limit=1)] == [3.0]
    assert [(s.at, s.batch_size, s.goodput) for s in again.samples("a")] == [(2.5, 32, 120.0), (3.5, 128, 150.0)]
    assert again.samples("a", limit=1)[0].at == 3.5
    again.close()


def test_a_state_database_of_an_earlier_version_opens_with_an_empty_history(tmp_path):
    path = tmp_path / "state.db"
    with sqlite3.connect(path) as db:
        db.executescript(OLD_SCHEMA)
    store = StateStore(path)
    assert store.job("old").status == "completed"
    assert store.rounds() == [] and store.samples("old") == []
    store.record_round(RoundRecord(5.0, 0, 0, 0, ()))
    assert len(store.rounds()) == 1
    store.close()


def test_a_login_link_works_once_and_not_after_it_expires():
    now = [0.0]
    sessions = Sessions(clock=lambda: now[0])
    code = sessions.new_code()
    session = sessions.redeem(code)
    assert session and sessions.valid(session)
    assert sessions.redeem(code) is None and not sessions.valid("forged") and not sessions.valid("")
    late = sessions.new_code()
    now[0] += LINK_TTL_S + 1
    assert sessions.redeem(late) is None
