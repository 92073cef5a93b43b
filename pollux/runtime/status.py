"""A job's status and the one rule for changing it: `next_status(status, event)`, pure, the whole table below.

Every change of a job's status in the state store goes through `next_status`, inside the transaction that records
it, so the status read and the status written cannot be separated by another writer.

    pending  ── launched ──────────────► running
    pending  ── launch deferred ───────► pending     (GPUs or the previous group still held: retried later)
    pending  ── launch refused ────────► failed      (no such program, an allocation the pool cannot hold)
    running  ── finished ──────────────► completed   (every worker exited 0)
    running  ── checkpointed ──────────► pending     (stopped on request, or its scheduler died: resumes)
    running  ── crashed ───────────────► pending     (retried from its checkpoint after a back-off)
    running  ── gave up ───────────────► failed      (crashed as often as the service allows)
    pending | running ── cancelled ────► cancelled
    completed, failed, cancelled: final, nothing moves them; only a final job may be removed (`pollux rm`)
"""

from __future__ import annotations

from enum import StrEnum

from pollux.errors import TransitionError


class JobStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class JobEvent(StrEnum):
    LAUNCHED = "launched"
    LAUNCH_DEFERRED = "launch deferred"
    LAUNCH_REFUSED = "launch refused"
    FINISHED = "finished"
    CHECKPOINTED = "checkpointed"
    CRASHED = "crashed"
    GAVE_UP = "gave up"
    CANCELLED = "cancelled"


FINAL = frozenset({JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED})

_TRANSITIONS: dict[tuple[JobStatus, JobEvent], JobStatus] = {
    (JobStatus.PENDING, JobEvent.LAUNCHED): JobStatus.RUNNING,
    (JobStatus.PENDING, JobEvent.LAUNCH_DEFERRED): JobStatus.PENDING,
    (JobStatus.PENDING, JobEvent.LAUNCH_REFUSED): JobStatus.FAILED,
    (JobStatus.PENDING, JobEvent.CANCELLED): JobStatus.CANCELLED,
    (JobStatus.RUNNING, JobEvent.FINISHED): JobStatus.COMPLETED,
    (JobStatus.RUNNING, JobEvent.CHECKPOINTED): JobStatus.PENDING,
    (JobStatus.RUNNING, JobEvent.CRASHED): JobStatus.PENDING,
    (JobStatus.RUNNING, JobEvent.GAVE_UP): JobStatus.FAILED,
    (JobStatus.RUNNING, JobEvent.CANCELLED): JobStatus.CANCELLED,
}


def next_status(status: JobStatus | str, event: JobEvent, job: str = "the job") -> JobStatus:
    """The status after `event`; a `TransitionError` naming both when the event cannot happen in that status."""
    current = JobStatus(status)
    after = _TRANSITIONS.get((current, event))
    if after is None:
        already = "already " if current in FINAL else ""
        raise TransitionError(f"job {job!r} is {already}{current}: '{event}' cannot happen to it now")
    return after


def check_removable(job: str, status: JobStatus | str) -> None:
    """Only a finished job may be removed: a `TransitionError` saying to cancel one that may still run."""
    if JobStatus(status) not in FINAL:
        raise TransitionError(f"job {job!r} is {status}: cancel it first (`pollux cancel {job}`), then remove it")
