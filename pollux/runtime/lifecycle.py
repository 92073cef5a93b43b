"""A real job's life over the store and the launcher: launch, stop (it checkpoints), and every exit turned into its
next status: finished, cancelled, checkpointed to move or wait, crashed and retried after a back-off, or failed.

Every transition is one transaction of the `StateStore`, so a scheduler killed at any point loses nothing
(docs/design.md, "The runtime"). All launcher calls happen on the service's loop thread.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pollux.agent import environment
from pollux.agent.checkpoint import NAME as CHECKPOINT_FILE
from pollux.agent.report import params_json
from pollux.cluster import Allocation
from pollux.errors import LaunchError, UnknownJobError
from pollux.policies.base import JobView
from pollux.policies.typed_search import model_on
from pollux.runtime import joblog
from pollux.runtime.config import ServiceConfig
from pollux.runtime.launcher import EXIT_NODE_LOST, EXIT_STOPPED, Launcher, LaunchRequest
from pollux.runtime.reports import ReportCache
from pollux.runtime.spec import JobSpec
from pollux.runtime.status import JobEvent
from pollux.runtime.store import JobState, StateStore

LOG = logging.getLogger("pollux.runtime")
LOG_TAIL_LINES = 20
KILL_WAIT_S = 30.0  # after SIGKILL, how long to wait for the processes to vanish before giving up on them


@dataclass
class JobLoopState:
    """What the loop knows about a job beyond the store (rebuilt after a restart)."""

    not_before: float = 0.0  # back-off after a crash or a failed launch: not relaunched before this (service clock)
    reason: str = ""  # why it waits, from the last round
    relaunch: str = "resume"  # what its next launch is, for the log: a retry after a crash, a re-allocation, ...


def seconds_said(value: float) -> str:
    """Seconds as said to the user: 0.5, 5, 10 (what the retry will wait, to the tenth)."""
    return f"{value:.1f}".removesuffix(".0")


def crash_point(point: str) -> None:
    """Crash-consistency tests set `POLLUX_TEST_CRASH_AT=<point>` to SIGKILL the scheduler exactly there."""
    if os.environ.get("POLLUX_TEST_CRASH_AT") == point:
        os.kill(os.getpid(), signal.SIGKILL)


def launch_env(view: JobView, gpu_type: str) -> dict[str, str]:
    """What the agent learns about the GPUs it is launched on (`pollux.agent.environment`): their type; the
    policy's bootstrap estimate of its model there where it has not run there yet (`model_on`: scaled by the 1-GPU
    throughput ratio); and that type's per-GPU batch bounds where they differ (memory)."""
    env = {environment.GPU_TYPE: gpu_type}
    if gpu_type not in view.throughput_params_by_type and (model := model_on(view, gpu_type)) is not None:
        env[environment.THROUGHPUT_BOOTSTRAP] = json.dumps(params_json(model))
    if gpu_type in view.local_bsz_bounds_by_type:
        env[environment.LOCAL_BSZ_BOUNDS] = environment.format_bounds(view.local_bsz_bounds_by_type[gpu_type])
    return env


class JobLifecycle:
    """The job state machine: each exit code becomes the job's next status in one place (`settle`)."""

    def __init__(
        self,
        config: ServiceConfig,
        store: StateStore,
        launcher: Launcher,
        reports: ReportCache,
        clock: Callable[[], float],
        wake: Callable[[], None],
    ) -> None:
        self.config = config
        self.store = store
        self.launcher = launcher
        self.reports = reports
        self.clock = clock
        self.wake = wake  # asks the loop for another pass soon (GPUs a round meant for someone are free)
        self._jobs: dict[str, JobLoopState] = {}
        self._specs: dict[str, JobSpec] = {}

    def job(self, name: str) -> JobLoopState:
        return self._jobs.setdefault(name, JobLoopState())

    def forget(self, name: str) -> None:
        """Drop what the loop knows of a removed job (its spec above all): a new job may take its name."""
        self._jobs.pop(name, None)
        self._specs.pop(name, None)

    def reason(self, name: str) -> str:
        job = self._jobs.get(name)
        return job.reason if job else ""

    def spec(self, state: JobState) -> JobSpec:
        """The job's spec, parsed once (a spec never changes after submission)."""
        spec = self._specs.get(state.name)
        if spec is None:
            spec = self._specs[state.name] = JobSpec.from_json_dict(state.spec)
        return spec

    def backoff(self, attempts: int) -> float:
        return self.config.backoff_s * 2.0 ** max(attempts - 1, 0)

    def next_retry(self, now: float) -> float | None:
        """The earliest end of a back-off still ahead, if any."""
        return min((job.not_before for job in self._jobs.values() if job.not_before > now), default=None)

    # -- exits ------------------------------------------------------------------------------------------------
    def settle(self, name: str, code: int, now: float, stop_reason: str = "", reallocation: bool = False) -> None:
        """The one place where a group's exit code becomes the job's next status. `stop_reason` says why the
        scheduler stopped it (empty: nobody asked it to stop); `reallocation`: a round stopped it to move or preempt
        it, which counts as one of Pollux's re-allocations once it has checkpointed."""
        state = self.store.job(name)
        if code == 0:
            self.store.record_exit(name, JobEvent.FINISHED, now, "training script finished")
        elif state.cancel_requested:
            self.store.record_exit(name, JobEvent.CANCELLED, now, "cancelled by the user")
        elif code == EXIT_NODE_LOST:  # the cluster's failure, not the job's: no crash counted, no back-off
            reason = "its node was lost; resumes from its last checkpoint on nodes that are alive"
            self.store.record_exit(name, JobEvent.CHECKPOINTED, now, reason)
            self.job(name).relaunch = "resume after a lost node"
        elif code == EXIT_STOPPED or stop_reason:
            reason = stop_reason or "stopped by a SIGTERM from outside Pollux"
            self.store.record_exit(name, JobEvent.CHECKPOINTED, now, reason, reallocated=reallocation)
            self.job(name).relaunch = "re-allocation" if reallocation else "resume"
        else:
            self._crashed(state, code, now)
        LOG.info("job %s: %s", name, "its node was lost" if code == EXIT_NODE_LOST else f"exit {code}")

    def _crashed(self, state: JobState, code: int, now: float) -> None:
        """A crash: retried from its checkpoint after a back-off, until `max_attempts`; then failed."""
        name = state.name
        attempts, tail = state.attempts + 1, joblog.tail(self.config.log_dir(name), LOG_TAIL_LINES)
        error = f"exit {code}\n{tail}"
        if attempts >= self.config.max_attempts:
            reason = f"crashed {attempts} times (last exit {code})"
            self.store.record_exit(name, JobEvent.GAVE_UP, now, reason, error=error, crashed=True)
            return
        delay = self.backoff(attempts)
        self.job(name).not_before = now + delay
        self.job(name).relaunch = "retry after a crash"
        where = "from its checkpoint" if self.has_checkpoint(state) else "from the start"
        reason = (
            f"crashed (exit {code}); retry {attempts}/{self.config.max_attempts - 1} {where} in {seconds_said(delay)} s"
        )
        self.store.record_exit(name, JobEvent.CRASHED, now, reason, error=error, crashed=True)

    def has_checkpoint(self, state: JobState) -> bool:
        """Whether the agent saved a checkpoint (`ckpt-<seq>.plx`) in the folder the job is launched with."""
        folder = self.config.checkpoint_dir(self.spec(state))
        try:
            return any(CHECKPOINT_FILE.match(entry.name) for entry in folder.iterdir())
        except OSError:  # no folder yet: it never saved one
            return False

    def watch(self, active: Sequence[JobState], now: float) -> bool:
        """Settle the worker groups of `active` jobs that exited; True if any did (the next round should come
        early)."""
        changed = False
        for state in active:
            if state.status != "running":
                continue
            try:
                code = self.launcher.poll(state.name)
            except UnknownJobError:  # the launcher never had it (cannot happen after recover): relaunch it
                self.settle(state.name, EXIT_STOPPED, now, stop_reason="lost by the launcher; relaunching")
                changed = True
                continue
            if code is None:
                continue
            self.reports.refresh(state.name, now)
            self.launcher.forget(state.name)
            self.settle(state.name, code, self.clock())  # now, not when the pass began: a back-off counts from here
            changed = True
        return changed

    # -- stops ------------------------------------------------------------------------------------------------
    def stop(self, names: Sequence[str]) -> dict[str, int]:
        """SIGTERM the groups and wait for their checkpoints; SIGKILL past the grace period; their exit codes.
        A group still alive long after SIGKILL (a process stuck in the kernel) is given up on with code 137."""
        for name in names:
            self.launcher.stop(name)
        grace_end = time.monotonic() + self.config.stop_grace_s
        give_up = grace_end + KILL_WAIT_S
        codes: dict[str, int] = {}
        killed = False
        while len(codes) < len(names):
            for name in names:
                if name not in codes and (code := self.launcher.poll(name)) is not None:
                    codes[name] = code
            waiting = [name for name in names if name not in codes]
            if waiting and time.monotonic() > grace_end and not killed:
                for name in waiting:
                    LOG.warning("job %s did not stop within %.0f s; killing it", name, self.config.stop_grace_s)
                    self.launcher.kill(name)
                killed = True
            elif waiting and time.monotonic() > give_up:
                for name in waiting:
                    LOG.error("job %s: workers survive SIGKILL; giving up on them", name)
                    codes[name] = 137
            elif waiting:
                time.sleep(0.05)
        for name in names:
            with contextlib.suppress(RuntimeError):  # a group given up on stays known to the launcher
                self.launcher.forget(name)
        return codes

    def handle_cancels(self, active: Sequence[JobState], now: float) -> bool:
        """Carry out stored cancel requests: stop the job if it runs (it checkpoints), then mark it cancelled."""
        wanted = [s for s in active if s.cancel_requested]
        running = [s.name for s in wanted if s.status == "running"]
        codes = self.stop(running) if running else {}
        for state in wanted:
            self.settle(state.name, codes.get(state.name, EXIT_STOPPED), self.clock(), stop_reason="cancelled")
        return bool(wanted)

    def stop_all(self, reason: str) -> None:
        """Stop every running job (each checkpoints) and leave it pending for the next service."""
        self.handle_cancels(self.store.jobs(include_finished=False), self.clock())
        running = [s.name for s in self.store.jobs(include_finished=False) if s.status == "running"]
        codes = self.stop(running)
        for name in running:
            self.settle(name, codes[name], self.clock(), stop_reason=reason)

    # -- launches ---------------------------------------------------------------------------------------------
    def launch(self, view: JobView, allocation: Allocation, gpu_type: str, now: float) -> None:
        """Start the job's workers at `allocation` (GPUs of `gpu_type`) and record them in one transaction. A launch
        that may work later (GPUs still held, the previous group still exiting) backs off; one that cannot (no such
        program) fails the job."""
        name = view.name
        state = self.store.job(name)
        spec = self.spec(state)
        interval = self.config.checkpoint_interval_of(spec)
        request = LaunchRequest(
            job=name,
            command=spec.command,
            allocation=allocation,
            log_dir=self.config.log_dir(name),
            cwd=spec.workdir or Path.cwd(),
            env={
                environment.JOB_NAME: name,
                environment.CHECKPOINT_DIR: str(self.config.checkpoint_dir(spec)),
                environment.REPORT_PATH: str(self.config.report_path(name)),
                environment.METRICS_PATH: str(self.config.metrics_path(name)),
                environment.CHECKPOINT_INTERVAL_S: environment.format_interval(interval),
                **launch_env(view, gpu_type),
            },
            lock_path=self.config.job_dir(name) / "group.lock",
        )
        launched_before = any(status == "running" for _, status, _ in self.store.history(name))
        try:
            workers = self.launcher.launch(request)
        except LaunchError as error:
            message = str(error)  # most launchers' errors name the job already: "job nobin: ..."
            LOG.warning("%s", message if message.startswith(f"job {name}:") else f"job {name}: {message}")
            if error.transient:
                self.job(name).not_before = now + self.config.backoff_s
                self.store.record_exit(name, JobEvent.LAUNCH_DEFERRED, now, f"could not launch yet ({error}); retrying")
            else:
                self.store.record_exit(name, JobEvent.LAUNCH_REFUSED, now, "could not launch", error=str(error))
            return
        crash_point("after-launch")
        self.store.record_launch(name, allocation, workers, now, restart=launched_before, gpu_type=gpu_type)
