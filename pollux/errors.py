"""One error hierarchy: every message says what is wrong, where, and how to fix it.

The CLI prints a `PolluxError` as one line and exits 2; anything else is a bug and keeps its traceback.
"""


class PolluxError(Exception):
    """Base of every error caused by input or environment (not by a bug)."""


class DataNotFoundError(PolluxError):
    """The artifact's data files are nowhere to be found (and could not be fetched)."""


class DataIntegrityError(PolluxError):
    """A data file exists but does not match its sha256 in the manifest."""


class ProfileError(PolluxError):
    """A job profile file is missing, malformed, or holds an impossible value."""


class SpecError(PolluxError):
    """A job or cluster specification is invalid."""


class TraceError(PolluxError):
    """A workload trace row is malformed."""


class SimulationError(PolluxError):
    """A simulation cannot finish (e.g. a job that no allocation can ever hold)."""


class CatalogError(SpecError):
    """A parametric job catalog (TOML) is unreadable or has a bad entry; the message names file, type and field."""


class AgentError(PolluxError):
    """The PyTorch job agent (`pollux.agent`) was used or configured wrongly; the message says how to fix it."""


class CheckpointError(AgentError):
    """No good checkpoint could be restored although checkpoint files exist (every candidate is corrupt)."""


class CorruptCheckpoint(Exception):
    """One checkpoint file failed its integrity check. Internal: the store falls back to an older file, and only
    when none is good does the user see a `CheckpointError`."""


class ReportError(AgentError):
    """A job report file is unreadable or breaks the schema; the message names the file and the field."""


class UnknownJobError(PolluxError):
    """A job name the scheduler has never seen (or has already forgotten)."""


class LaunchError(PolluxError):
    """Worker processes for a job could not be started (missing executable, unknown node, no free slots).

    `transient` tells the service whether the same launch may succeed later without anyone fixing anything: GPUs
    held by other jobs, a node briefly not alive, an actor slow to start, the job's previous worker group still
    exiting. Such a launch is retried with back-off; a permanent one (missing executable or working directory, an
    allocation the pool cannot hold) fails the job."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class TransitionError(SpecError):
    """A job cannot take this step in its status (e.g. a finished job launched again); names both."""


class ServiceError(PolluxError):
    """The scheduler service is unreachable, refused a request, or is already running; the message says why."""


class SchedulerDownError(ServiceError):
    """No scheduler answers on the state directory (never started, stopped, or killed); its jobs are still in the
    state database, which `pollux ls` then reads directly."""


class StateError(PolluxError):
    """A state directory's database cannot be used by this version of Pollux (a newer one wrote it)."""


class AllocationError(Exception):
    """A policy produced allocations that break a placement rule (a node over capacity, two distributed jobs sharing
    a node where the policy avoids that, an unknown job). A bug in the policy, not bad input: deliberately not a
    `PolluxError`, so the command line shows its traceback instead of a one-line message."""


class AccessError(ServiceError):
    """A tenant's token asked for what it may not touch (another tenant's job, shutting the service down): 403."""
