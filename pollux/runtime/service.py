"""The scheduler service: the simulator's engine, a real clock, a launcher and a durable store.

Every round (`interval_s`, or sooner when a job arrives, finishes, crashes or is cancelled) the service reads the
jobs' agent reports, builds the policy's `JobView`s, and runs the same `pollux.engine.Scheduler` as the simulator;
the decisions it returns are carried out by a `Launcher` (local processes or Ray actors): SIGTERM, wait for the
checkpoint, relaunch at the new size. Between rounds it watches the worker groups: a finished group completes its
job, a crashed one is retried from its checkpoint with exponential back-off, up to `max_attempts`, then fails with
its log tail.

The parts, each with one job: `JobLifecycle` (`lifecycle.py`: the job state machine over store and launcher),
`RuntimeBackend` (`backend.py`: the engine's views and decisions), `ReportCache` (`reports.py`), and, with Ray's
autoscaler, `ElasticPool` (`pool.py`). The service keeps the loop, the recovery and the requests of the API.

Durability: every transition is one transaction in the `StateStore`. On start, jobs the store says were running
belong to a previous scheduler process that died: their recorded workers are reaped (they also got SIGTERM from
PDEATHSIG when it died, and checkpointed), and the jobs wait for the first round to be relaunched from their
checkpoints. Nothing is lost and no job ever has two worker groups.

Threads: all launcher calls happen on the one thread that runs `run()` (worker processes are bound to it by
PDEATHSIG); the HTTP API's threads only read the store and queue requests for that thread.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pollux.agent.report import JobReport
from pollux.cluster import Allocation, Cluster, num_gpus
from pollux.engine import Decision, Scheduler
from pollux.errors import ServiceError, SpecError
from pollux.quota import QuotaLayer, RoundQuota
from pollux.runtime.backend import RuntimeBackend
from pollux.runtime.config import ServiceConfig, make_runtime_policy, service_tenants
from pollux.runtime.launcher import Launcher
from pollux.runtime.lifecycle import JobLifecycle
from pollux.runtime.removal import remove_job
from pollux.runtime.reports import ReportCache
from pollux.runtime.spec import JobSpec, check_gpu_types
from pollux.runtime.status import JobEvent, JobStatus
from pollux.runtime.store import JobState, RoundRecord, StateStore
from pollux.tenants import DEFAULT_TENANT

if TYPE_CHECKING:
    from pollux.runtime.autoscale import RayAutoscaler
    from pollux.runtime.pool import ElasticPool

__all__ = ["Service", "ServiceConfig"]

LOG = logging.getLogger("pollux.runtime")


@dataclass
class _Requests:
    """What the API threads hand to the loop thread (cancels go through the store: they must survive a crash)."""

    shutdown: bool = False
    wake: bool = False


def _describe(decision: Decision, held: Allocation, status: str) -> str:
    """One decision of a round and whether it took, for the log (written once the round's launches are done):
    `resize digits 1 -> 2 GPU(s) on (2,)`, or `start nobin 0 -> 1 GPU(s) on (1,): not launched (failed)` after
    the launcher's error."""
    change = f"{decision.kind} {decision.job} {num_gpus(held)} -> {num_gpus(decision.allocation)} GPU(s)"
    if decision.kind == "stop":
        return change
    placed = f"{change} on {decision.allocation}"
    return placed if status == "running" else f"{placed}: not launched ({status})"


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
        self.clock = clock
        self.policy = make_runtime_policy(config.policy, config.restart_delay_s)  # a bad name fails before any file
        config.state_dir.mkdir(parents=True, exist_ok=True)
        # checked against the most the cluster can offer (`capacity`), before the store opens
        self.tenants = service_tenants(config, autoscaler.largest if autoscaler is not None else launcher.cluster)
        self.store = StateStore(config.database)
        self.reports = ReportCache(config, self.store)
        self.lifecycle = JobLifecycle(config, self.store, launcher, self.reports, clock, self._wake)
        self.backend = RuntimeBackend(self.store, self.lifecycle, self.reports, lambda: self.launcher.cluster)
        self.pool = self._pool(autoscaler) if autoscaler is not None else None
        self.backend.tenants = self.tenants
        quota = QuotaLayer(self.tenants) if self.tenants is not None else None
        self.scheduler = Scheduler(self.policy, self.backend, config.lease, quota)
        self.last_quota: RoundQuota | None = None  # the last round's quota picture (`pollux ls`, the dashboard)
        self._requests = _Requests()
        self._cond = threading.Condition()
        self._stopped = threading.Event()
        self._next_round = 0.0  # when the next periodic round is due, on the service's clock (as back-offs are)
        self.rounds = 0

    def _pool(self, autoscaler: RayAutoscaler) -> ElasticPool:
        """The elastic pool, which only a Ray launcher can be (Ray's autoscaler starts its nodes)."""
        from pollux.runtime.pool import ElasticPool
        from pollux.runtime.ray_launcher import RayLauncher

        if not isinstance(self.launcher, RayLauncher):
            raise ServiceError("--autoscale needs the Ray backend (--backend ray)")
        window = self.config.autoscale_window_rounds
        return ElasticPool(autoscaler, self.launcher, self.store, self.lifecycle, self.backend, window)

    # -- API side (any thread) --------------------------------------------------------------------------------
    def submit(self, spec: JobSpec) -> JobState:
        """Record a new job; the next round (started now) considers it. A job the cluster can never run (more GPUs
        than it has, GPU types it lacks, a tenant it does not have) is refused here, naming what the cluster has."""
        capacity = self.capacity()
        if spec.min_gpus > capacity.num_gpus:
            raise SpecError(
                f"job {spec.name!r}: field 'min_gpus' {spec.min_gpus} exceeds the {capacity.num_gpus} "
                "GPUs of this cluster; lower min_gpus"
            )
        check_gpu_types(spec, capacity.gpu_types, {t: capacity.gpus_of_type(t) for t in capacity.gpu_types})
        if self.tenants is not None:
            self.tenants.check_job(spec.name, spec.tenant)
        elif spec.tenant != DEFAULT_TENANT:
            raise SpecError(
                f"job {spec.name}: unknown tenant {spec.tenant!r}; tenants: {DEFAULT_TENANT} (this scheduler has no "
                "tenants file: drop the field, or start it with `pollux up --tenants FILE`)"
            )
        state = self.store.add_job(spec, self.clock())
        self._wake()
        return state

    def capacity(self) -> Cluster:
        """The most the cluster can offer: its nodes now (an auto-scaled one: as many as it may grow to)."""
        return self.pool.largest if self.pool is not None else self.launcher.cluster

    def cancel(self, name: str) -> JobState:
        """Stop a job for good (its workers checkpoint first). The request is stored before this returns, so a
        shutdown or a crash of the scheduler cannot lose it; a finished job stays as it is."""
        state = self.store.request_cancel(name, self.clock())
        self._wake()
        return state

    def remove(self, name: str) -> JobStatus:
        """Remove a finished job so that its name can be used again (`pollux.runtime.removal`); its final status.
        The loop no longer touches a finished job, so what it knew of it is dropped here."""
        status = remove_job(self.store, self.config, name, self.clock())
        self.lifecycle.forget(name)
        self.reports.forget(name)
        return status

    def request_shutdown(self) -> None:
        """Stop the loop: running jobs checkpoint and wait, pending, for the next `pollux up`."""
        with self._cond:
            self._requests.shutdown = True
            self._cond.notify_all()

    def wait_stopped(self, timeout: float | None = None) -> bool:
        return self._stopped.wait(timeout)

    def reason(self, name: str) -> str:
        """Why a pending job waits (the policy's word, or its back-off)."""
        return self.lifecycle.reason(name)

    def report(self, name: str) -> JobReport | None:
        """The job's last agent report (`ReportCache.report`)."""
        return self.reports.report(name)

    def _wake(self) -> None:
        with self._cond:
            self._requests.wake = True
            self._cond.notify_all()

    # -- the loop (one thread) --------------------------------------------------------------------------------
    def run(self) -> None:
        """Recover, then schedule and watch until a shutdown is requested; then stop every job gracefully."""
        try:
            self.recover()
            while self.step():
                with self._cond:
                    if not (self._requests.wake or self._requests.shutdown):
                        self._cond.wait(self.config.tick_s)
            running = [s for s in self.store.jobs(include_finished=False) if s.status == "running"]
            LOG.info("shutting down: %d job(s) checkpointing", len(running))
            self.lifecycle.stop_all("scheduler shut down; resumes at the next `pollux up`")
            LOG.info("stopped")
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
            active = self.store.jobs(include_finished=False)  # read again only after a transition
            cancelled = self.lifecycle.handle_cancels(active, now)
            if cancelled:
                active = self.store.jobs(include_finished=False)
            changed = self.lifecycle.watch(active, now)
            if changed:
                active = self.store.jobs(include_finished=False)
            for state in active:  # running jobs' latest reports: for `pollux ls`, and for the round below
                if state.status == "running":
                    self.reports.refresh(state.name, now)
            now = self.clock()
            if changed or cancelled or requests.wake or self._round_due(now):
                # the jobs as they are: the round need not read them again (an elastic pool may move them first)
                self.backend.round_states = (now, active) if self.pool is None else None
                lease_ends = self.schedule(now)
                self._next_round = min(self.clock() + self.config.interval_s, lease_ends or math.inf)
            retry = self.lifecycle.next_retry(self.clock())  # retries come when promised, on the service's clock
            if retry is not None:
                self._next_round = min(self._next_round, retry)
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
                self.lifecycle.job(state.name).not_before = state.updated_at + self.lifecycle.backoff(state.attempts)
        if stray:
            LOG.info("recovered: %d recorded worker(s), %d still alive and stopped", len(stray), alive)

    def schedule(self, now: float) -> float | None:
        """One round of the policy (on the reports `step` just read); `RuntimeBackend.apply` carries out its
        decisions. With an elastic pool, the cluster is sized first, and a round without any node waits. When the
        next round is due at the latest (a lease the policy wanted to break ends then), if it is."""
        if self.pool is not None and not self.pool.step(now, self.policy):
            return None
        result = self.scheduler.step(now)
        self.rounds += 1
        self.last_quota = result.quota
        views = self.backend.last_views
        held = {view.name: view.allocation for view in views}
        if result.decisions:
            changes = "; ".join(
                _describe(decision, held[decision.job], self.store.job(decision.job).status)
                for decision in result.decisions
            )
            LOG.info("round %d: %s", self.rounds, changes)
        self._record_round(now, result.decisions, held)
        for view in views:
            self.lifecycle.job(view.name).reason = result.reasons.get(view.name, "")
        return result.next_round_at

    def _record_round(self, now: float, decisions: Sequence[Decision], held: dict[str, Allocation]) -> None:
        """Keep the round for the dashboard's scheduler view: its decisions, and the cluster as it left it (as the
        round read it, when it changed nothing)."""
        read = self.backend.round_states
        unchanged = not decisions and read is not None and read[0] == now
        active = read[1] if read is not None and unchanged else self.store.jobs(include_finished=False)
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
