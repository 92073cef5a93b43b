"""The one rule for a job's status, checked on every (status, event) pair against what the runtime promises."""

from __future__ import annotations

import itertools

import pytest

from pollux.errors import TransitionError
from pollux.runtime.status import FINAL, JobEvent, JobStatus, next_status

PAIRS = list(itertools.product(JobStatus, JobEvent))
LIVE = [s for s in JobStatus if s not in FINAL]


def outcome(status: JobStatus, event: JobEvent) -> JobStatus | None:
    try:
        return next_status(status, event, "job")
    except TransitionError:
        return None


@pytest.mark.parametrize(("status", "event"), PAIRS)
def test_a_final_status_never_changes(status: JobStatus, event: JobEvent) -> None:
    if status in FINAL:
        with pytest.raises(TransitionError, match=f"already {status}"):
            next_status(status, event, "job")


def test_a_user_can_cancel_a_job_in_every_live_status() -> None:
    assert all(outcome(s, JobEvent.CANCELLED) == JobStatus.CANCELLED for s in LIVE)


def test_only_a_launch_makes_a_job_run_and_only_a_pending_job_is_launched() -> None:
    into_running = {(s, e) for s, e in PAIRS if outcome(s, e) == JobStatus.RUNNING}
    assert into_running == {(JobStatus.PENDING, JobEvent.LAUNCHED)}
    launch_events = (JobEvent.LAUNCHED, JobEvent.LAUNCH_DEFERRED, JobEvent.LAUNCH_REFUSED)
    assert {s for s, e in PAIRS if e in launch_events and outcome(s, e)} == {JobStatus.PENDING}


def test_what_happens_to_workers_happens_only_to_a_running_job() -> None:
    worker_events = (JobEvent.FINISHED, JobEvent.CHECKPOINTED, JobEvent.CRASHED, JobEvent.GAVE_UP)
    assert {s for s, e in PAIRS if e in worker_events and outcome(s, e)} == {JobStatus.RUNNING}


def test_a_checkpoint_or_a_crash_with_retries_left_loses_nothing_the_job_waits() -> None:
    for event in (JobEvent.CHECKPOINTED, JobEvent.CRASHED, JobEvent.LAUNCH_DEFERRED):
        assert {outcome(s, event) for s in LIVE} - {None} == {JobStatus.PENDING}


def test_only_finishing_completes_and_only_giving_up_or_a_refused_launch_fails() -> None:
    assert {e for s, e in PAIRS if outcome(s, e) == JobStatus.COMPLETED} == {JobEvent.FINISHED}
    assert {e for s, e in PAIRS if outcome(s, e) == JobStatus.FAILED} == {JobEvent.GAVE_UP, JobEvent.LAUNCH_REFUSED}


def test_every_live_status_can_reach_every_final_one() -> None:
    reach = {s: {s} for s in JobStatus}
    for _ in JobStatus:  # fixed point of one-step reachability
        for status, event in PAIRS:
            if (after := outcome(status, event)) is not None:
                reach[status] |= reach[after]
    assert all(reach[s] >= FINAL for s in LIVE)


def test_an_impossible_step_names_the_job_its_status_and_the_event() -> None:
    with pytest.raises(TransitionError, match="job 'digits' is pending: 'finished' cannot happen"):
        next_status(JobStatus.PENDING, JobEvent.FINISHED, "digits")
