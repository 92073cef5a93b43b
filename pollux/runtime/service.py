"""The scheduler service: the simulator's engine, a real clock, a launcher and a durable store.

Every round (`interval_s`, or sooner when a job arrives, finishes, crashes or is cancelled) the service reads the
jobs' agent reports, builds the policy's `JobView`s, and runs the same `pollux.engine.Scheduler` as the simulator;
the decisions it returns are carried out by a `Launcher` (local processes or Ray actors): SIGTERM, wait for the
checkpoint, relaunch at the new size. Between rounds it watches the worker groups: a finished group completes its
job, a crashed one is retried from its checkpoint with exponential back-off, up to `max_attempts`, then fails with
its log tail.

Durability: every transition is one transaction in the `StateStore`. On start, jobs the store says were running
belong to a previous scheduler process that died: their recorded workers are reaped (they also got SIGTERM from
PDEATHSIG when it died, and checkpointed), and the jobs wait for the first round to be relaunched from their
checkpoints. Nothing is lost and no job ever has two worker groups.

Threads: all launcher calls happen on the one thread that runs `run()` (worker processes are bound to it by
PDEATHSIG); the HTTP API's threads only read the store and queue requests for that thread.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, cast

from pollux.agent.checkpoint import NAME as CHECKPOINT_FILE
from pollux.agent.report import BatchInUse, JobReport, params_json, read_report
from pollux.autoscale import WINDOW_ROUNDS, Autoscaler, AutoscaleSettings
from pollux.cluster import Allocation, Cluster, free_gpus, num_gpus
from pollux.data.philly import philly_service_samples
from pollux.engine import Decision, Scheduler
from pollux.errors import LaunchError, ReportError, SpecError, UnknownJobError
from pollux.goodput import GoodputFunction, GradientStats, ThroughputParams
from pollux.policies.base import JobView, Policy, exploration_bound
from pollux.policies.registry import PolicySettings, make_policy, policy_class
from pollux.policies.typed_search import model_on
from pollux.runtime import joblog
from pollux.runtime.launcher import EXIT_NODE_LOST, EXIT_STOPPED, Launcher, LaunchRequest
from pollux.runtime.spec import JobSpec, check_gpu_types
from pollux.runtime.status import FINAL, JobEvent
from pollux.runtime.store import JobSample, JobState, RoundRecord, StateStore

if TYPE_CHECKING:
    from pollux.runtime.autoscale import RayAutoscaler
    from pollux.runtime.ray_launcher import RayLauncher

LOG = logging.getLogger("pollux.runtime")
LOG_TAIL_LINES = 20
KILL_WAIT_S = 30.0  # after SIGKILL, how long to wait for the processes to vanish before giving up on them


@dataclass(frozen=True)
class ServiceConfig:
    """How the service schedules and how patient it is with jobs."""

    state_dir: Path
    policy: str = "pollux"
    interval_s: float = 60.0  # seconds between rounds when nothing happens
    restart_delay_s: float = 30.0  # δ of Pollux's re-allocation factor: what a restart costs a job
    stop_grace_s: float = 60.0  # after SIGTERM, how long a job may take to checkpoint before SIGKILL
    max_attempts: int = 3  # crashed launches before a job is marked failed
    backoff_s: float = 5.0  # wait before the first retry of a crashed job; doubles per crash
    checkpoint_interval_s: float | None = None  # jobs' periodic checkpoints (a spec may override); None: automatic
    tick_s: float = 0.25  # how often worker groups and reports are polled
    autoscale_window_rounds: int = WINDOW_ROUNDS  # rounds of utility averaged before a resize (pollux.autoscale)

    @property
    def database(self) -> Path:
        return self.state_dir / "state.db"

    def job_dir(self, name: str) -> Path:
        return self.state_dir / "jobs" / name

    def log_dir(self, name: str) -> Path:
        """The job's rank logs (`pollux.runtime.joblog`)."""
        return self.job_dir(name) / "logs"

    def report_path(self, name: str) -> Path:
        return self.job_dir(name) / "report.json"

    def checkpoint_dir(self, spec: JobSpec) -> Path:
        """Where the job's agent saves: its spec's folder, else one in the job's state folder."""
        return spec.checkpoint_dir or self.job_dir(spec.name) / "checkpoints"


def make_runtime_policy(name: str, restart_delay_s: float = 30.0) -> Policy:
    """The named policy, configured for real jobs: no simulator-only knowledge (true step times), and no discount
    on a waiting job's start (rounds run when a job arrives or its back-off ends, where the artifact's discount is
    ~0). A policy that owns the jobs' batch sizes cannot run real jobs: their agents choose them."""
    if policy_class(name).batch_owner == "policy":
        raise SpecError(
            f"policy {name!r} chooses batch sizes for the jobs, which the runtime's agent takes from its own goodput "
            "model; use pollux, fifo, tiresias, tiresias-gittins or optimus"
        )
    settings = PolicySettings(restart_delay_s=restart_delay_s, discount_starts=False)
    return make_policy(name, settings, {"gittins_service_samples": philly_service_samples})


def report_metrics(report: JobReport | None) -> tuple[float | None, float | None]:
    """(goodput, statistical efficiency) of a job at the batch and GPUs its agent last reported: the goodput of the
    best configuration on those GPUs (Pollux §3.3, what the agent itself picks) and the efficiency of the batch in
    use; None until the agent has fitted its model. One computation for `pollux ls`, the API and the dashboard,
    remembered per model, statistics and batch (every dashboard poll asks again for every job)."""
    if report is None or report.throughput_params is None or report.grad_stats is None:
        return None, None
    return _metrics(
        report.throughput_params,
        report.grad_stats,
        report.init_batch_size,
        report.batch,
        report.max_batch_size,
        report.local_bsz_bounds,
        report.gradient_accumulation,
    )


@functools.lru_cache(maxsize=4096)
def _metrics(
    params: ThroughputParams,
    stats: GradientStats,
    init_batch_size: int,
    batch: BatchInUse,
    max_batch_size: int,
    local_bsz_bounds: tuple[int, int],
    accumulation: bool,
) -> tuple[float | None, float | None]:
    if batch.num_replicas <= 0:
        return None, None
    fn = GoodputFunction(params, stats, init_batch_size)
    best = fn.optimize(batch.num_nodes, batch.num_replicas, max_batch_size, local_bsz_bounds, accumulation=accumulation)
    return float(best.goodput), float(fn.efficiency(batch.total_batch_size))


def job_view(
    spec: JobSpec, state: JobState, report: JobReport | None, cluster: Cluster, service_gpu_s: float
) -> JobView:
    """What the policy may know about a real job: its spec, where it runs, and what its agent last reported."""
    init_bsz = report.init_batch_size if report else spec.init_batch_size
    max_bsz = report.max_batch_size if report else spec.max_batch_size
    bounds = report.local_bsz_bounds if report else spec.local_bsz_bounds
    allocation = tuple(state.allocation) if state.allocation else cluster.empty()
    if spec.adaptive:
        explored = report.max_replicas_seen if report else 0
        bound = exploration_bound(explored, max_bsz, bounds[0])
    else:
        bound = max(init_bsz // bounds[0], 1)
    max_gpus = max(min(bound, spec.max_gpus, cluster.num_gpus), spec.min_gpus, 1)
    by_type = report.throughput_params_by_type if report else {}
    return JobView(
        name=spec.name,
        application=spec.name,
        submit_time_s=state.submitted_at,
        allocation=allocation,
        num_restarts=state.reallocations,  # R of the re-allocation factor: crash retries and resumes are not counted
        attained_service_gpu_s=service_gpu_s,
        requested_gpus=min(spec.gpus, cluster.num_gpus),
        max_gpus=max_gpus,
        init_batch_size=init_bsz,
        max_batch_size=max_bsz,
        local_bsz_bounds=bounds,
        batch_size=None if spec.adaptive else init_bsz,
        min_gpus=spec.min_gpus,
        throughput_params=report.throughput_params if report else None,  # of the type it runs (or ran) on
        grad_stats=report.grad_stats if report else None,
        gpu_types=spec.gpu_types,
        throughput_params_by_type=dict(by_type),
        local_bsz_bounds_by_type={
            **spec.local_bsz_bounds_by_type,
            **(report.local_bsz_bounds_by_type if report else {}),
        },
        run_time_by_type_s=dict(report.run_time_by_type_s) if report else {},
        single_gpu_throughput_by_type=dict(spec.single_gpu_throughput),
    )


def launch_env(view: JobView, gpu_type: str) -> dict[str, str]:
    """What the agent learns about the GPUs it is launched on (`pollux.agent.context`): their type; the policy's
    bootstrap estimate of its model there where it has not run there yet (`model_on`: scaled by the 1-GPU
    throughput ratio); and that type's per-GPU batch bounds where they differ (memory)."""
    env = {"POLLUX_GPU_TYPE": gpu_type}
    if gpu_type not in view.throughput_params_by_type and (model := model_on(view, gpu_type)) is not None:
        env["POLLUX_THROUGHPUT_BOOTSTRAP"] = json.dumps(params_json(model))
    if gpu_type in view.local_bsz_bounds_by_type:
        low, high = view.local_bsz_bounds_by_type[gpu_type]
        env["POLLUX_LOCAL_BSZ_BOUNDS"] = f"{low},{high}"
    return env


def _interval_env(job_s: float | None, config: ServiceConfig) -> str:
    """The agent's `POLLUX_CHECKPOINT_INTERVAL_S`: the job's own interval, else the service's, else "auto"."""
    interval = job_s if job_s is not None else config.checkpoint_interval_s
    return "auto" if interval is None else f"{interval:g}"


@dataclass
class _JobLoopState:
    """What the loop thread knows about a job beyond the store (rebuilt after a restart)."""

    not_before: float = 0.0  # back-off after a crash or a failed launch: not relaunched before this (service clock)
    report_mtime: float = 0.0
    report: JobReport | None = None
    reason: str = ""  # why it waits, from the last round
    relaunch: str = "resume"  # what its next launch is, for the log: a retry after a crash, a re-allocation, ...


@dataclass
class _Requests:
    """What the API threads hand to the loop thread (cancels go through the store: they must survive a crash)."""

    shutdown: bool = False
    wake: bool = False


def _seconds(value: float) -> str:
    """Seconds as said to the user: 0.5, 5, 10 (what the retry will wait, to the tenth)."""
    return f"{value:.1f}".removesuffix(".0")


def _describe(decision: Decision, held: Allocation) -> str:
    """One decision of a round, for the log: `resize digits 1 -> 2 GPU(s) on (2,)`."""
    change = f"{decision.kind} {decision.job} {num_gpus(held)} -> {num_gpus(decision.allocation)} GPU(s)"
    return change if decision.kind == "stop" else f"{change} on {decision.allocation}"


def _crash_point(point: str) -> None:
    """Crash-consistency tests set `POLLUX_TEST_CRASH_AT=<point>` to SIGKILL the scheduler exactly there."""
    if os.environ.get("POLLUX_TEST_CRASH_AT") == point:
        os.kill(os.getpid(), signal.SIGKILL)


class Service:
    """Runs the scheduling loop over a launcher; the API calls the public methods from any thread."""

    def __init__(
        self,
        config: ServiceConfig,
        launcher: Launcher,
        clock: Callable[[], float] = time.time,
        autoscaler: RayAutoscaler | None = None,
    ) -> None:
        self.config = config
        self.launcher = launcher
        self.autoscaler = autoscaler  # with one, the launcher is a RayLauncher whose pool follows the requests
        self.clock = clock
        self.policy = make_runtime_policy(config.policy, config.restart_delay_s)  # a bad name fails before any file
        self.scaling = (  # the simulator's rule, per GPU type; idle nodes are billed, so no job: each minimum
            Autoscaler(
                AutoscaleSettings.per_type(
                    autoscaler.node_types, window_rounds=config.autoscale_window_rounds, idle_to_minimum=True
                )
            )
            if autoscaler is not None
            else None
        )
        config.state_dir.mkdir(parents=True, exist_ok=True)
        self.store = StateStore(config.database)
        self.scheduler = Scheduler(self.policy, _Backend(self))
        self._jobs: dict[str, _JobLoopState] = {}
        self._requests = _Requests()
        self._cond = threading.Condition()
        self._stopped = threading.Event()
        self._next_round = 0.0  # when the next periodic round is due, on the service's clock (as back-offs are)
        self._last_views: list[JobView] = []  # what the last round showed the policy
        self._stored_reports: dict[str, JobReport | None] = {}  # reports of jobs this process has not read itself
        self.rounds = 0

    # -- API side (any thread) --------------------------------------------------------------------------------
    def submit(self, spec: JobSpec) -> JobState:
        """Record a new job; the next round (started now) considers it. A job the cluster can never run (more GPUs
        than it has, GPU types it lacks) is refused here, naming what the cluster has."""
        capacity = self.capacity()
        if spec.min_gpus > capacity.num_gpus:
            raise SpecError(
                f"job {spec.name!r}: field 'min_gpus' {spec.min_gpus} exceeds the {capacity.num_gpus} "
                "GPUs of this cluster; lower min_gpus"
            )
        check_gpu_types(spec, capacity.gpu_types, {t: capacity.gpus_of_type(t) for t in capacity.gpu_types})
        state = self.store.add_job(spec, self.clock())
        self._wake()
        return state

    def capacity(self) -> Cluster:
        """The most the cluster can offer: its nodes now (an auto-scaled one: as many as it may grow to)."""
        return self.autoscaler.largest if self.autoscaler is not None else self.launcher.cluster

    def cancel(self, name: str) -> JobState:
        """Stop a job for good (its workers checkpoint first). The request is stored before this returns, so a
        shutdown or a crash of the scheduler cannot lose it; a finished job stays as it is."""
        state = self.store.request_cancel(name, self.clock())
        self._wake()
        return state

    def request_shutdown(self) -> None:
        """Stop the loop: running jobs checkpoint and wait, pending, for the next `pollux up`."""
        with self._cond:
            self._requests.shutdown = True
            self._cond.notify_all()

    def wait_stopped(self, timeout: float | None = None) -> bool:
        return self._stopped.wait(timeout)

    def reason(self, name: str) -> str:
        """Why a pending job waits (the policy's word, or its back-off)."""
        job = self._jobs.get(name)
        return job.reason if job else ""

    def _wake(self) -> None:
        with self._cond:
            self._requests.wake = True
            self._cond.notify_all()

    def _job(self, name: str) -> _JobLoopState:
        return self._jobs.setdefault(name, _JobLoopState())

    # -- the loop (one thread) --------------------------------------------------------------------------------
    def run(self) -> None:
        """Recover, then schedule and watch until a shutdown is requested; then stop every job gracefully."""
        try:
            self.recover()
            while self.step():
                with self._cond:
                    if not (self._requests.wake or self._requests.shutdown):
                        self._cond.wait(self.config.tick_s)
            self._stop_all("scheduler shut down; resumes at the next `pollux up`")
        finally:
            self.store.close()
            self._stopped.set()

    def step(self) -> bool:
        """One pass of the loop: cancels, exited groups, and a round when one is due or something changed.
        An error in one pass is logged and the loop goes on (the service must outlive a bad round). False once a
        shutdown was requested."""
        with self._cond:
            requests, self._requests = self._requests, _Requests(shutdown=self._requests.shutdown)
        if requests.shutdown:
            return False
        try:
            now = self.clock()
            cancelled = self._handle_cancels(now)
            changed = self.watch(now)
            self._read_reports(now)  # running jobs' latest reports: for `pollux ls`, and for the round below
            now = self.clock()
            if changed or cancelled or requests.wake or self._round_due(now):
                self.schedule(now)
                self._next_round = self.clock() + self.config.interval_s
            self._wake_for_retries()
        except Exception:
            LOG.exception("scheduling pass failed; the service goes on and retries")
            self._next_round = self.clock() + min(self.config.interval_s, 5.0)
        return True

    def _round_due(self, now: float) -> bool:
        """The periodic round is due (or the clock went back by more than an interval: never wait that out)."""
        return now >= self._next_round or self._next_round - now > self.config.interval_s

    def recover(self) -> None:
        """Reap the workers of a scheduler process that died and put its jobs back in the queue."""
        now = self.clock()
        stray = [worker for _, worker in self.store.workers()]
        alive = self.launcher.reap(stray) if stray else 0
        for state in self.store.jobs(include_finished=False):
            if state.cancel_requested:
                self.store.record_exit(state.name, JobEvent.CANCELLED, now, "cancelled by the user")
            elif state.status == "running":
                self.store.record_exit(
                    state.name,
                    JobEvent.CHECKPOINTED,
                    now,
                    f"scheduler restarted; {alive} stray worker(s) stopped; resumes",
                )
            elif state.attempts:  # a crashed job keeps its back-off across restarts of the scheduler
                self._job(state.name).not_before = state.updated_at + self._backoff(state.attempts)
        if stray:
            LOG.info("recovered: %d recorded worker(s), %d still alive and stopped", len(stray), alive)

    def schedule(self, now: float) -> None:
        """One round of the policy (on the reports `step` just read); `_Backend.apply` carries out its decisions.
        With an autoscaler, the cluster is sized first (`autoscale`), and a round without any node waits."""
        if self.autoscaler is not None and not self.autoscale(now):
            return
        result = self.scheduler.step(now)
        self.rounds += 1
        held = {view.name: view.allocation for view in self._last_views}
        if result.decisions:
            changes = "; ".join(_describe(decision, held[decision.job]) for decision in result.decisions)
            LOG.info("round %d: %s", self.rounds, changes)
        self._record_round(now, result.decisions, held)
        for view in self._last_views:
            self._job(view.name).reason = result.reasons.get(view.name, "")

    def _record_round(self, now: float, decisions: Sequence[Decision], held: dict[str, Allocation]) -> None:
        """Keep the round for the dashboard's scheduler view: its decisions, and the cluster as it left it."""
        active = self.store.jobs(include_finished=False)
        running = [s for s in active if s.status == "running"]
        self.store.record_round(
            RoundRecord(
                at=now,
                gpus_in_use=sum(sum(s.allocation) for s in running),
                jobs_running=len(running),
                jobs_pending=len(active) - len(running),
                decisions=tuple(
                    {
                        "job": d.job,
                        "kind": d.kind,
                        "gpus_from": num_gpus(held[d.job]),
                        "gpus_to": num_gpus(d.allocation),
                        "allocation": list(d.allocation),
                    }
                    for d in decisions
                ),
            )
        )

    def autoscale(self, now: float) -> bool:
        """Cloud auto-scaling (`pollux.autoscale`, `pollux.runtime.autoscale`): the `Autoscaler` observes the
        round's allocation on the pool and says how many nodes of each type to hold; Ray is asked for them, and the
        pool becomes the alive nodes up to that many per type. A job on a node that left the pool (released by this
        decision, or lost) checkpoints and waits to be placed again. Whether any node is in the pool to schedule on."""
        autoscaler, scaling = self.autoscaler, self.scaling
        assert autoscaler is not None and scaling is not None
        launcher = cast("RayLauncher", self.launcher)
        pool = launcher.cluster if launcher.has_nodes else None
        views = self._views_on(pool, now)
        held = (
            None
            if autoscaler.requested is None
            else {t: autoscaler.requested.get(t, 0) for t in autoscaler.largest.gpu_types}
        )
        decision = scaling.step(views, pool, now, self.policy, held)
        if decision.resized and decision.nodes_by_type != (held or {}):
            LOG.info("autoscale: %s", decision.reason)
        autoscaler.request(decision.nodes_by_type)
        remap = launcher.refresh(keep=decision.nodes_by_type)
        if remap is not None:
            LOG.info("pool: %s", launcher.cluster.describe() if launcher.has_nodes else "no GPU nodes")
            self._renumber(remap)
        if not launcher.has_nodes:
            for view in views:
                self._job(view.name).reason = "waiting for Ray's autoscaler to start nodes"
        return launcher.has_nodes

    def _views_on(self, pool: Cluster | None, now: float) -> list[JobView]:
        """The active jobs as the autoscaler sees them: bounded by the largest cluster allowed (what they could grow
        to), holding their GPUs on the pool (nothing while no node is up)."""
        assert self.autoscaler is not None
        views = []
        for state in self.store.jobs(include_finished=False):
            if state.cancel_requested or (state.status == "pending" and now < self._job(state.name).not_before):
                continue
            spec = JobSpec.from_json_dict(state.spec)
            service_gpu_s = self.store.attained_service(state.name, now)
            view = job_view(
                spec, replace(state, allocation=()), self.report(state.name), self.autoscaler.largest, service_gpu_s
            )
            running = pool is not None and state.status == "running" and len(state.allocation) == pool.num_nodes
            held = tuple(state.allocation) if running else pool.empty() if pool is not None else ()
            views.append(replace(view, allocation=held))
        return views

    def _renumber(self, remap: dict[int, int]) -> None:
        """The pool changed: running jobs get their allocations in the new node order; one whose node is gone is
        stopped (it checkpoints; on a lost node it was killed with it) and waits to be placed again."""
        running = [s for s in self.store.jobs(include_finished=False) if s.status == "running" and s.allocation]
        gone = [s.name for s in running if any(g and n not in remap for n, g in enumerate(s.allocation))]
        codes = self._stop(gone) if gone else {}
        for name, code in codes.items():
            self._settle(name, code, self.clock(), stop_reason="its node left the pool; resumes from its checkpoint")
        nodes = len(cast("RayLauncher", self.launcher).node_ids)
        for state in running:
            if state.name in codes:
                continue
            allocation = [0] * nodes
            for n, gpus in enumerate(state.allocation):
                if gpus:
                    allocation[remap[n]] = gpus
            self.store.set_allocation(state.name, tuple(allocation))

    def watch(self, now: float) -> bool:
        """Settle worker groups that exited; True if any did (the next round should come early)."""
        changed = False
        for state in self.store.jobs(include_finished=False):
            if state.status != "running":
                continue
            try:
                code = self.launcher.poll(state.name)
            except UnknownJobError:  # the launcher never had it (cannot happen after recover): relaunch it
                self._settle(state.name, EXIT_STOPPED, now, stop_reason="lost by the launcher; relaunching")
                changed = True
                continue
            if code is None:
                continue
            self._read_report(state.name, now)
            self.launcher.forget(state.name)
            self._settle(state.name, code, self.clock())  # now, not when the pass began: a back-off counts from here
            changed = True
        return changed

    def _wake_for_retries(self) -> None:
        """Bring the next round forward to the earliest end of a back-off, so retries come when promised (both on
        the service's clock: a test that moves it sees the retry exactly at the end of its back-off)."""
        now = self.clock()
        ends = [job.not_before for job in self._jobs.values() if job.not_before > now]
        if ends:
            self._next_round = min(self._next_round, min(ends))

    # -- transitions ------------------------------------------------------------------------------------------
    def _settle(self, name: str, code: int, now: float, stop_reason: str = "", reallocation: bool = False) -> None:
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
            self._job(name).relaunch = "resume after a lost node"
        elif code == EXIT_STOPPED or stop_reason:
            reason = stop_reason or "stopped by a SIGTERM from outside Pollux"
            self.store.record_exit(name, JobEvent.CHECKPOINTED, now, reason, reallocated=reallocation)
            self._job(name).relaunch = "re-allocation" if reallocation else "resume"
        else:
            attempts, tail = state.attempts + 1, self._log_tail(name)
            error = f"exit {code}\n{tail}"
            if attempts >= self.config.max_attempts:
                reason = f"crashed {attempts} times (last exit {code})"
                self.store.record_exit(name, JobEvent.GAVE_UP, now, reason, error=error, crashed=True)
            else:
                delay = self._backoff(attempts)
                self._job(name).not_before = now + delay
                self._job(name).relaunch = "retry after a crash"
                where = "from its checkpoint" if self._has_checkpoint(state) else "from the start"
                reason = (
                    f"crashed (exit {code}); retry {attempts}/{self.config.max_attempts - 1} {where} "
                    f"in {_seconds(delay)} s"
                )
                self.store.record_exit(name, JobEvent.CRASHED, now, reason, error=error, crashed=True)
        LOG.info("job %s: %s", name, "its node was lost" if code == EXIT_NODE_LOST else f"exit {code}")

    def _has_checkpoint(self, state: JobState) -> bool:
        """Whether the agent saved a checkpoint (`ckpt-<seq>.plx`) in the folder the job is launched with."""
        spec = JobSpec.from_json_dict(state.spec)
        folder = self.config.checkpoint_dir(spec)
        try:
            return any(CHECKPOINT_FILE.match(entry.name) for entry in folder.iterdir())
        except OSError:  # no folder yet: it never saved one
            return False

    def _backoff(self, attempts: int) -> float:
        return self.config.backoff_s * 2.0 ** max(attempts - 1, 0)

    def _stop(self, names: Sequence[str]) -> dict[str, int]:
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

    def _launch(self, name: str, allocation: Allocation, now: float) -> None:
        """Start the job's workers at `allocation` and record them in one transaction. A launch that may work
        later (GPUs still held, the previous group still exiting) backs off; one that cannot (no such program)
        fails the job."""
        state = self.store.job(name)
        spec = JobSpec.from_json_dict(state.spec)
        checkpoint_dir = self.config.checkpoint_dir(spec)
        cluster = self.launcher.cluster
        gpu_type = cluster.allocation_type(allocation) or cluster.gpu_types[0]
        view = job_view(spec, state, self.report(name), cluster, 0.0)
        request = LaunchRequest(
            job=name,
            command=spec.command,
            allocation=allocation,
            log_dir=self.config.log_dir(name),
            cwd=spec.workdir or Path.cwd(),
            env={
                "POLLUX_JOB_NAME": name,
                "POLLUX_CHECKPOINT_DIR": str(checkpoint_dir),
                "POLLUX_REPORT_PATH": str(self.config.report_path(name)),
                "POLLUX_CHECKPOINT_INTERVAL_S": _interval_env(spec.checkpoint_interval_s, self.config),
                **launch_env(view, gpu_type),
            },
            lock_path=self.config.job_dir(name) / "group.lock",
        )
        launched_before = any(status == "running" for _, status, _ in self.store.history(name))
        try:
            workers = self.launcher.launch(request)
        except LaunchError as error:
            LOG.warning("job %s: %s", name, error)
            if getattr(error, "transient", False):
                self._job(name).not_before = now + self.config.backoff_s
                self.store.record_exit(name, JobEvent.LAUNCH_DEFERRED, now, f"could not launch yet ({error}); retrying")
            else:
                self.store.record_exit(name, JobEvent.LAUNCH_REFUSED, now, "could not launch", error=str(error))
            return
        _crash_point("after-launch")
        self.store.record_launch(name, allocation, workers, now, restart=launched_before, gpu_type=gpu_type)

    def _handle_cancels(self, now: float) -> bool:
        """Carry out stored cancel requests: stop the job if it runs (it checkpoints), then mark it cancelled."""
        wanted = [s for s in self.store.jobs(include_finished=False) if s.cancel_requested]
        running = [s.name for s in wanted if s.status == "running"]
        codes = self._stop(running) if running else {}
        for state in wanted:
            self._settle(state.name, codes.get(state.name, EXIT_STOPPED), self.clock(), stop_reason="cancelled")
        return bool(wanted)

    def _stop_all(self, reason: str) -> None:
        """Stop every running job (each checkpoints) and leave it pending for the next service."""
        self._handle_cancels(self.clock())
        running = [s.name for s in self.store.jobs(include_finished=False) if s.status == "running"]
        codes = self._stop(running)
        for name in running:
            self._settle(name, codes[name], self.clock(), stop_reason=reason)

    # -- reports ----------------------------------------------------------------------------------------------
    def _read_reports(self, now: float) -> None:
        for state in self.store.jobs(include_finished=False):
            if state.status == "running":
                self._read_report(state.name, now)

    def _read_report(self, name: str, now: float) -> None:
        """Take the job's report file into memory and the store when it changed since the last look."""
        path = self.config.report_path(name)
        job = self._job(name)
        try:
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            return
        if mtime == job.report_mtime:
            return
        job.report_mtime = mtime
        try:
            report = read_report(path)
        except ReportError as error:
            LOG.warning("job %s: ignoring its report: %s", name, error)
            return
        job.report = report
        self.store.record_report(name, report.to_json_dict(), now)
        goodput, efficiency = report_metrics(report)
        batch = report.batch
        sample = JobSample(
            now, batch.num_replicas, batch.local_bsz, batch.accum_steps, batch.total_batch_size, goodput, efficiency
        )
        self.store.record_sample(name, sample)

    def report(self, name: str) -> JobReport | None:
        """The job's last report: in memory, or from the store after a restart (read once: only this process's loop
        stores reports, and a report it reads takes the place of the stored one)."""
        job = self._jobs.get(name)
        if job is not None and job.report is not None:
            return job.report
        if name not in self._stored_reports:
            self._stored_reports[name] = self.store.report_of(name)
        return self._stored_reports[name]

    def _log_tail(self, name: str) -> str:
        return joblog.tail(self.config.log_dir(name), LOG_TAIL_LINES)


class _Backend:
    """The engine's view of the service: job views from the store and reports, decisions through the launcher."""

    def __init__(self, service: Service) -> None:
        self.service = service

    @property
    def cluster(self) -> Cluster:
        return self.service.launcher.cluster

    def job_views(self, now: float) -> list[JobView]:
        service = self.service
        views = []
        for state in service.store.jobs(include_finished=False):
            job = service._job(state.name)
            if state.cancel_requested:
                continue
            if state.status == "pending" and now < job.not_before:
                job.reason = f"backing off; retry in {job.not_before - now:.0f} s"
                continue
            spec = JobSpec.from_json_dict(state.spec)
            service_gpu_s = service.store.attained_service(state.name, now)
            view = job_view(spec, state, service.report(state.name), self.cluster, service_gpu_s)
            if not any(view.may_run_on(t) for t in self.cluster.gpu_types):  # its types have no node (yet)
                job.reason = f"waiting for a node of type {' or '.join(spec.gpu_types or ())}"
                continue
            views.append(view)
        service._last_views = views
        return views

    def apply(self, decisions: Sequence[Decision], now: float) -> None:
        """Carry out a round's decisions. Starts that fit on GPUs free now go first, so a job does not wait for other
        jobs' checkpoints; then the moving jobs are stopped (they checkpoint) and relaunched, and the other starts
        launched. A job that ended otherwise than planned while being stopped (it finished, crashed or was
        cancelled meanwhile), or that could not be launched, leaves GPUs this round meant for it: another round
        follows in the next loop pass."""
        service = self.service
        held = {s.name: s.allocation for s in service.store.jobs(include_finished=False) if s.allocation}
        free = free_gpus(self.cluster, held)
        early = []
        for decision in decisions:
            if decision.kind == "start" and all(g <= f for g, f in zip(decision.allocation, free, strict=True)):
                early.append(decision)
                free = [f - g for f, g in zip(free, decision.allocation, strict=True)]
        for decision in early:
            self._start(decision)
        moving = {d.job: d for d in decisions if d.kind in ("stop", "resize")}
        codes = service._stop(list(moving)) if moving else {}
        if codes:
            _crash_point("after-stop")
        for name, code in codes.items():
            decision = moving[name]
            why = (
                f"checkpointed to move to {num_gpus(decision.allocation)} GPU(s)"
                if decision.kind == "resize"
                else "preempted after checkpointing"
            )
            service._settle(name, code, service.clock(), stop_reason=why, reallocation=True)
            if service.store.job(name).status != "pending":
                service._wake()
        for decision in decisions:
            if decision not in early and decision.kind != "stop" and num_gpus(decision.allocation) > 0:
                self._start(decision)

    def _start(self, decision: Decision) -> None:
        """Launch a job at its new allocation, unless it finished or was cancelled while others were stopped."""
        service = self.service
        state = service.store.job(decision.job)
        if state.status in FINAL or state.cancel_requested:
            return
        service._launch(decision.job, decision.allocation, service.clock())
        state = service.store.job(decision.job)
        if state.status != "running":
            service._wake()
            return
        LOG.info(
            "job %s: launched %d worker(s) on %s, attempt %d, %s",
            state.name,
            num_gpus(state.allocation),
            state.allocation,
            state.attempts + 1,
            f"restart {state.restarts} ({service._job(state.name).relaunch})" if state.restarts else "first start",
        )
