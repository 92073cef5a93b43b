"""One job's worker group on Ray, once started: its placement group, its actors and what is known of their workers.

* An actor that dies under a running worker (it was killed) counts as a crash with code 137 (`EXIT_LOST`,
  "killed"), so the scheduler retries the job from its last checkpoint.
* A node lost under a running group (Ray declared it dead) is not the job's crash: the group's code is then
  `EXIT_NODE_LOST`, whatever its other workers exited with (a rank whose peer vanished fails in its next
  collective, often before Ray's health checks declare the node dead: a crashed group with an actor that died or
  did not answer waits, still "running", up to `VERDICT_WAIT_S` for Ray's word), and the scheduler resumes the job
  from its last checkpoint on nodes that are alive.
* A lost node never blocks the caller long: a poll waits at most `POLL_WAIT_S` for the actors' answers and a kill
  `KILL_ANSWER_S`; an answer not in by then is asked for again at the next poll.

Not locked: the launcher calls a group under its own lock.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pollux.runtime.launcher import EXIT_NODE_LOST, EXIT_STOPPED, WorkerInfo
from pollux.runtime.processes import GroupExit
from pollux.runtime.ray_worker import KILL_WAIT_S

if TYPE_CHECKING:
    from ray.actor import ActorHandle
    from ray.util.placement_group import PlacementGroup

LOG = logging.getLogger(__name__)

EXIT_LOST = 137  # a worker whose actor died (node lost, actor killed): reported as if SIGKILLed
POLL_WAIT_S = 2.0  # how long a poll waits for the actors' answers; one not in by then is asked again next poll
VERDICT_WAIT_S = 30.0  # how long a crashed group with an unreachable actor waits for Ray to declare its node dead
KILL_ANSWER_S = 2 * KILL_WAIT_S + 1.0  # how long a kill waits for the actors' answers; one not in is unreachable

AliveIds = Callable[[bool], frozenset[str]]  # the node ids Ray lists alive; True: read them now, not a cached list


def crash_verdict(code: int, lost: Sequence[str], unreachable: bool, crashed_for_s: float) -> int | None:
    """A crashed group's code: `EXIT_NODE_LOST` if one of its nodes is `lost` (Ray lists it dead); None (still
    running) while an actor is `unreachable` and Ray has had less than `VERDICT_WAIT_S` to say so; else `code`."""
    if lost:
        return EXIT_NODE_LOST
    if unreachable and crashed_for_s < VERDICT_WAIT_S:
        return None
    return code


def kill_actors(actors: Sequence[ActorHandle]) -> None:
    """Kill actors for good (their workers get SIGTERM from the kernel), ignoring those already gone."""
    import ray

    for actor in actors:
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)


def release_group(actors: Sequence[ActorHandle], pg: PlacementGroup | None) -> None:
    """Give back everything a group holds: its actors (their workers get SIGTERM), then its GPUs."""
    from ray.util.placement_group import remove_placement_group

    kill_actors(actors)
    if pg is not None:
        with contextlib.suppress(Exception):  # removed already
            remove_placement_group(pg)


@dataclass
class RayGroup:
    """One job's placement group, its actors (one per rank) and what is known of their workers."""

    job: str
    placement_group: PlacementGroup
    actors: list[ActorHandle]
    workers: list[WorkerInfo]
    node_ids: list[str]  # the Ray node of each rank (a node that left the pool has no pool index any more)
    exit: GroupExit = field(init=False)
    code: int | None = None  # the group's exit code once settled: `exit`'s, or EXIT_NODE_LOST
    unreachable: set[int] = field(default_factory=set)  # ranks whose actors died or did not answer a kill
    crashed_at: float | None = None  # when its workers had all exited with a crash (monotonic)

    def __post_init__(self) -> None:
        self.exit = GroupExit.of(len(self.actors))

    def running(self) -> bool:
        return self.exit.running()

    def poll(self, alive_ids: AliveIds) -> int | None:
        """None while any worker runs; then the group's exit code. The first crash (a dead actor included) gets
        the other workers killed at once, since they would block in the next collective. A group that crashed
        with a node Ray declares dead exits `EXIT_NODE_LOST`, whatever its workers said (module docstring)."""
        if self.code is None:
            if self.running():
                self._collect(alive_ids(False))
                if self.exit.crash_code is not None and self.running():
                    self.kill()
            code = self.exit.settle()
            if code is not None and code != 0 and code != EXIT_STOPPED:
                code = self._verdict(code, alive_ids(self.crashed_at is None))
            self.code = code
        return self.code

    def stop(self) -> None:
        """Ask each actor whose worker runs to SIGTERM it; returns without waiting."""
        for actor, code in zip(self.actors, self.exit.codes, strict=True):
            if code is None:
                actor.terminate.remote()

    def kill(self) -> None:
        """SIGKILL each running worker through its actor (collecting its code), then kill every actor."""
        calls = {i: self.actors[i].kill.remote() for i, c in enumerate(self.exit.codes) if c is None}
        answers = _answers(calls, KILL_ANSWER_S)
        for i in calls:
            code = answers.get(i)
            if i not in answers or isinstance(code, BaseException):  # the actor is gone or does not answer
                self.unreachable.add(i)
            self.exit.record(i, code if isinstance(code, int) else EXIT_LOST)
        kill_actors(self.actors)

    def release(self) -> None:
        """Give back the group's actors and GPUs (`release_group`)."""
        release_group(self.actors, self.placement_group)

    def _verdict(self, code: int, alive: frozenset[str]) -> int | None:
        """`crash_verdict` on this group, timed from when it first found its workers all exited with a crash."""
        lost = sorted(set(self.node_ids) - alive)
        if lost:
            LOG.warning("job %s: Ray node(s) %s lost under its workers", self.job, ", ".join(lost))
        elif self.crashed_at is None:
            self.crashed_at = time.monotonic()
            if self.unreachable:
                LOG.info(
                    "job %s: crashed with unreachable rank(s) %s; waiting for Ray's word on their nodes",
                    self.job,
                    sorted(self.unreachable),
                )
        crashed_for_s = 0.0 if self.crashed_at is None else time.monotonic() - self.crashed_at
        return crash_verdict(code, lost, bool(self.unreachable), crashed_for_s)

    def _collect(self, alive: frozenset[str]) -> None:
        """Ask the actors of workers not known to have exited for their codes (waiting at most `POLL_WAIT_S`); a
        worker on a node Ray declares dead, or whose actor died, is lost."""
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

        for i, c in enumerate(self.exit.codes):
            if c is None and self.node_ids[i] not in alive:
                LOG.warning("rank %d's node %s is dead: its worker exited %d", i, self.node_ids[i], EXIT_LOST)
                self.exit.record(i, EXIT_LOST)
        calls = {i: self.actors[i].poll.remote() for i, c in enumerate(self.exit.codes) if c is None}
        for i, answer in _answers(calls, POLL_WAIT_S).items():
            if isinstance(answer, ActorUnavailableError):
                continue  # a transient hiccup: ask again at the next poll
            if isinstance(answer, (ActorDiedError, RayActorError)):
                LOG.warning("rank %d's actor died (node lost?): counting its worker as exited %d", i, EXIT_LOST)
                self.unreachable.add(i)
                answer = EXIT_LOST
            if isinstance(answer, int):
                self.exit.record(i, answer)


def _answers(calls: Mapping[int, Any], timeout_s: float) -> dict[int, object]:
    """The results of actor calls (`ObjectRef`s by rank) that are in within `timeout_s`, all waited for together:
    a value, or the exception the call raised. A call not in by then is left out."""
    import ray

    if not calls:
        return {}
    refs = list(calls.values())
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    answers: dict[int, object] = {}
    for i, ref in calls.items():
        if ref in ready:
            try:
                answers[i] = ray.get(ref, timeout=0)
            except Exception as exc:  # the call failed: the caller tells which failures mean what
                answers[i] = exc
    return answers
