"""The one interface between the runtime scheduler and whatever starts worker processes: local or Ray.

A launcher owns a pool of nodes with GPU slots (a `Cluster`) and starts, watches and stops *worker groups*: all
processes of one job at one allocation, wired like `torchrun` wires them (`RANK`, `LOCAL_RANK`, `WORLD_SIZE`,
`LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`, plus the request's own environment). The scheduler never touches
a process itself, so the local and Ray backends differ only here.

Exit codes a group reports (the worst of its workers, in this order of precedence):
    a crash code (anything but 0 and 143)   the job failed this attempt; retry from the checkpoint
    143                                      it stopped on request after checkpointing (SIGTERM)
    0                                        every worker finished the training script
    EXIT_NODE_LOST (no process exits with it) a node of the group was lost (its workers died with it): not the
                                             job's fault; resume from the last checkpoint on nodes that are alive
A group in which one worker crashed is killed by the launcher at once: the others would block in a collective.

At most one live worker group per job, even across a scheduler crash: a scheduler killed after `launch` returned
but before it recorded the workers leaves a group it cannot reap (it got SIGTERM and may still be checkpointing).
The local launcher takes an exclusive `flock` on the request's `lock_path` and hands it to every worker, so that it
is held while any of them (or their children) lives; the Ray launcher names each job's placement group and waits
for a dead driver's group of that name to be removed. Either way a launch that finds the old group still there
fails with a transient `LaunchError`: the service retries it later.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pollux.cluster import Allocation, Cluster

EXIT_STOPPED = 143  # 128 + SIGTERM: the agent checkpointed and exited on request
EXIT_NODE_LOST = 256  # beyond any process's exit code: the launcher's word that a node of the group was lost


@dataclass(frozen=True)
class LaunchRequest:
    """Start `command` for one job as `sum(allocation)` workers placed as `allocation` says (GPUs per node)."""

    job: str
    command: tuple[str, ...]
    allocation: Allocation
    log_dir: Path  # rank R's stdout and stderr go to rank-R.log here, opened by the worker (pollux.runtime.joblog)
    cwd: Path
    env: Mapping[str, str] = field(default_factory=dict)  # POLLUX_* variables, added to the inherited environment
    lock_path: Path | None = None  # held by the group's workers while any lives (local launcher; module docstring)


@dataclass(frozen=True)
class WorkerInfo:
    """One running worker, enough to find it again after a scheduler crash."""

    rank: int
    node: int
    pid: int
    host: str
    start_ticks: int = 0  # the process's start time in clock ticks since boot (tells a reused pid apart)


class Launcher(Protocol):
    """Starts, watches and stops the worker groups of jobs; at most one group per job at a time."""

    name: str  # the backend as users name it (`pollux up --backend`): what the dashboard's header shows

    @property
    def cluster(self) -> Cluster:
        """The node pool: nodes × GPU slots per node, as the policy sees it."""
        ...

    def launch(self, request: LaunchRequest) -> list[WorkerInfo]:
        """Start the job's worker group; returns its workers. Raises `pollux.errors.LaunchError` if it cannot:
        `transient` when a later try may succeed (GPUs or the job's lock still held, a node not alive, an actor
        slow to start), not when something must be fixed first (a missing executable or cwd, a bad allocation)."""
        ...

    def poll(self, job: str) -> int | None:
        """None while the group runs; once every worker has exited, the group's exit code (see the module
        docstring). A crashed worker makes the launcher kill its siblings and report the crash code."""
        ...

    def stop(self, job: str) -> None:
        """Ask every worker to checkpoint and exit (SIGTERM); returns at once, `poll` tells when they did."""
        ...

    def kill(self, job: str) -> None:
        """Kill every worker now (SIGKILL): for a group that ignored `stop` past its grace period."""
        ...

    def forget(self, job: str) -> None:
        """Drop an exited group's bookkeeping (its slots become free for the next launch)."""
        ...

    def reap(self, workers: list[WorkerInfo]) -> int:
        """Stop stray workers a previous scheduler process left behind (it was killed); SIGTERM, then SIGKILL
        after a grace period. Returns how many were still alive. A pid now used by another process is left
        alone (`start_ticks` differs)."""
        ...

    def shutdown(self) -> None:
        """Release the launcher's own resources (not the jobs': stop them first)."""
        ...
