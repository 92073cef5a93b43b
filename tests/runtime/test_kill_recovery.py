"""Nothing lost, ever (issue 15): `kill -9` of the scheduler four times while jobs of 1, 2 and 3 workers train (twice
with every job training, twice while workers start), then of one worker three times. Every job finishes, trains every
example of every epoch exactly once (its ledger), and each restart resumes from a checkpoint no older than the
checkpoint interval, or saved at the kill.

The scenario is benchmarks/kill_recovery.py's (one piece of code); the benchmark prints the same numbers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the agent needs torch: make test installs it (pip install -e '.[agent]')")

from benchmarks.kill_recovery import WORKERS, Outcome, run_scenario

INTERVAL_S = 1.0
# Seed 5's kills (during_relaunch 0.5): two with every job training, 3.3 and 1.5 s into it, then two without waiting
# for the jobs, 1.8 s after the scheduler serves and 0.7 s after the next one does (its workers start, those it
# killed may still be saving): each kind twice, where the benchmark's 10 kills of seed 0 have 2 of the second kind.
# Each kill restarts six workers (~5.5 s of CPU each), which made the ten kills most of this test's time.
KILLS, SEED = 4, 5
# the kills come at moments in seconds (~25 s of them with the jobs training, seed 5, the worker kills' 4-6 s waits
# included), so the training done by then grows as 1/STEP_S: EPOCHS x STEP_S (3.6) above 300 x 0.01 keeps the
# 3-worker job unfinished through its three kills on a fast machine, with 1,200 steps per job instead of 3,000
STEP_S = 0.03
EPOCHS = 120
# a restart may lose the interval, plus the steps the statistics exchange takes to agree on a save and a save in
# progress on a loaded machine; a killed worker that no periodic save covered would lose at least 4 s (the wait
# before each worker kill), more than this bound
SLACK_S = 2.0

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    root: Path = tmp_path_factory.mktemp("kills")
    return run_scenario(
        root,
        kills=KILLS,
        worker_kills=3,
        interval_s=INTERVAL_S,
        epochs=EPOCHS,
        seed=SEED,
        during_relaunch=0.5,
        step_s=STEP_S,
        backoff_s=0.25,  # the three retries after the worker kills wait 0.25 + 0.5 + 1 s, not 1 + 2 + 4 s
    )


def test_every_kill_happened_while_the_jobs_were_unfinished(outcome: Outcome) -> None:
    causes = [cause for cause, _ in outcome.kills]
    assert causes.count("scheduler") == KILLS and causes.count("worker") == 3


def test_the_scheduler_was_killed_both_with_every_job_training_and_while_workers_started(outcome: Outcome) -> None:
    assert 0 < outcome.kills_while_starting < KILLS, outcome.kills_while_starting


def test_every_job_finishes_having_trained_each_example_of_each_epoch_exactly_once(outcome: Outcome) -> None:
    assert outcome.statuses == dict.fromkeys(WORKERS, "completed")
    for job, final in outcome.finals.items():
        assert (final["ledger_min"], final["ledger_max"]) == (1, 1), job
        assert final["epochs"] == EPOCHS and final["examples"] == EPOCHS * 240


def test_a_killed_scheduler_costs_at_most_one_checkpoint_interval(outcome: Outcome) -> None:
    resumes = [r for r in outcome.resumes if r.cause == "scheduler"]
    assert {r.job for r in resumes} == set(WORKERS)  # each job was restarted by scheduler kills
    assert max(r.lost_s for r in resumes) <= INTERVAL_S + SLACK_S, resumes


def test_a_killed_worker_costs_at_most_one_checkpoint_interval(outcome: Outcome) -> None:
    resumes = [r for r in outcome.resumes if r.cause == "worker"]
    assert len(resumes) == 3 and {r.job for r in resumes} == {"three"}
    assert max(r.lost_s for r in resumes) <= INTERVAL_S + SLACK_S, resumes
