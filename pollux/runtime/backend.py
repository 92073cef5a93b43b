"""The engine's backend for real jobs: job views from the store and the agents' reports, and a round's decisions
carried out by the job lifecycle (checkpoint, relaunch at the new size)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from pollux.agent.report import JobReport
from pollux.cluster import Cluster, free_gpus, num_gpus
from pollux.engine import Decision
from pollux.policies.base import JobView
from pollux.policies.facts import JobFacts, job_view
from pollux.runtime.lifecycle import JobLifecycle, crash_point
from pollux.runtime.reports import ReportCache
from pollux.runtime.spec import JobSpec
from pollux.runtime.status import FINAL
from pollux.runtime.store import JobState, StateStore
from pollux.tenants import Tenants

LOG = logging.getLogger("pollux.runtime")


def job_facts(
    spec: JobSpec,
    state: JobState,
    report: JobReport | None,
    cluster: Cluster,
    service_gpu_s: float,
    trials_model: JobReport | None = None,
) -> JobFacts:
    """What the policy may know about a real job: its spec, where it runs, and what its agent last reported (its
    batch bounds, once it reports them, are the agent's). A trial that has not reported yet takes the throughput
    model and the most GPUs run of `trials_model`, a report of another trial of its experiment (the same model on
    the same cluster; docs/design.md, "Experiments"), never its gradient statistics."""
    init_bsz = report.init_batch_size if report else spec.init_batch_size
    model = report if report is not None else trials_model
    return JobFacts(
        name=spec.name,
        application=spec.name,
        submit_time_s=state.submitted_at,
        allocation=tuple(state.allocation) if state.allocation else cluster.empty(),
        num_restarts=state.reallocations,  # R of the re-allocation factor: crash retries and resumes are not counted
        attained_service_gpu_s=service_gpu_s,
        requested_gpus=min(spec.gpus, cluster.num_gpus),
        init_batch_size=init_bsz,
        max_batch_size=report.max_batch_size if report else spec.max_batch_size,
        local_bsz_bounds=report.local_bsz_bounds if report else spec.local_bsz_bounds,
        batch_size=None if spec.adaptive else init_bsz,
        max_replicas_run=model.max_replicas_seen if model else 0,
        gpu_cap=min(spec.max_gpus, cluster.num_gpus),
        min_gpus=spec.min_gpus,
        throughput_params=model.throughput_params if model else None,  # of the type it runs (or ran) on
        grad_stats=report.grad_stats if report else None,
        gpu_types=spec.gpu_types,
        throughput_params_by_type=dict(model.throughput_params_by_type) if model else {},
        local_bsz_bounds_by_type={
            **spec.local_bsz_bounds_by_type,
            **(report.local_bsz_bounds_by_type if report else {}),
        },
        run_time_by_type_s=dict(report.run_time_by_type_s) if report else {},
        single_gpu_throughput_by_type=dict(spec.single_gpu_throughput),
        allocated_at_s=state.updated_at if state.status == "running" else None,  # its launch: nothing else updates it
        tenant=spec.tenant,
        m0_steps=report.progress.m0_steps if report else 0.0,
        epochs_done=report.progress.epochs_done if report else 0.0,
        epochs=report.progress.epochs if report else None,
    )


def trials_models(states: Sequence[JobState], report: Callable[[str], JobReport | None]) -> dict[str, JobReport]:
    """Per experiment, the report of its trial that has run on the most GPUs (ties: the latest submitted), among
    `states` (finished jobs included) whose report has a throughput model: what its next trials start from, as the
    simulator's do (`pollux.sim.experiments`)."""
    best: dict[str, JobReport] = {}
    for state in states:
        experiment = state.spec.get("experiment")
        found = report(state.name) if experiment else None
        if experiment and found is not None and found.throughput_params is not None:
            held = best.get(experiment)
            if held is None or found.max_replicas_seen >= held.max_replicas_seen:
                best[experiment] = found
    return best


class RuntimeBackend:
    """Job views from the store and reports; decisions through the lifecycle and the launcher."""

    def __init__(
        self,
        store: StateStore,
        lifecycle: JobLifecycle,
        reports: ReportCache,
        cluster: Callable[[], Cluster],
    ) -> None:
        self.store = store
        self.lifecycle = lifecycle
        self.reports = reports
        self._cluster = cluster
        self.last_views: list[JobView] = []  # what the last round showed the policy
        self.round_states: tuple[float, list[JobState]] | None = (
            None  # (when, the unfinished jobs) as that round read them
        )
        self.tenants: Tenants | None = None  # the service's, if it has a tenants file: a job of another one waits

    @property
    def cluster(self) -> Cluster:
        return self._cluster()

    def view(
        self,
        state: JobState,
        cluster: Cluster,
        now: float,
        service_gpu_s: float = 0.0,
        trials: Callable[[], dict[str, JobReport]] | None = None,
    ) -> JobView:
        """`trials`: `trials_models` of every job, asked only for a trial that has not reported yet."""
        spec = self.lifecycle.spec(state)
        report = self.reports.report(state.name)
        model = None
        if report is None and spec.experiment is not None:
            model = (trials or self._trials_models)().get(spec.experiment)
        return job_view(job_facts(spec, state, report, cluster, service_gpu_s, model))

    def _trials_models(self) -> dict[str, JobReport]:
        return trials_models(self.store.jobs(), self.reports.report)

    def job_views(self, now: float) -> list[JobView]:
        """The jobs a round may place: not cancelled, not backing off, of a tenant the service has, and with a node of
        a type they accept."""
        cluster, views = self.cluster, []
        attained = self.store.attained_services(now)
        read_at, states = self.round_states or (None, [])
        if read_at != now:  # the service hands over what its pass read, when nothing changed since
            states = self.store.jobs(include_finished=False)
            self.round_states = (now, states)
        trials: dict[str, JobReport] | None = None

        def trials_once() -> dict[str, JobReport]:  # read every job's report once a round, and only if needed
            nonlocal trials
            if trials is None:
                trials = self._trials_models()
            return trials

        for state in states:
            job = self.lifecycle.job(state.name)
            if state.cancel_requested:
                continue
            if state.status == "pending" and now < job.not_before:
                job.reason = f"backing off; retry in {job.not_before - now:.0f} s"
                continue
            view = self.view(state, cluster, now, attained.get(state.name, 0.0), trials_once)
            if self.tenants is not None and view.tenant not in self.tenants.names:  # dropped by a new tenants file
                job.reason = f"tenant {view.tenant} is not in the tenants file ({', '.join(self.tenants.names)})"
                continue
            if not any(view.may_run_on(t) for t in cluster.gpu_types):  # its types have no node (yet)
                job.reason = f"waiting for a node of type {' or '.join(view.gpu_types or ())}"
                continue
            views.append(view)
        self.last_views = views
        return views

    def apply(self, decisions: Sequence[Decision], now: float) -> None:
        """Carry out a round's decisions. Starts that fit on GPUs free now go first, so a job does not wait for other
        jobs' checkpoints; then the moving jobs are stopped (they checkpoint) and relaunched, and the other starts
        launched. A job that ended otherwise than planned while being stopped (it finished, crashed or was
        cancelled meanwhile), or that could not be launched, leaves GPUs this round meant for it: another round
        follows in the next loop pass."""
        lifecycle = self.lifecycle
        read_at, states = self.round_states or (None, [])
        if read_at != now:  # decisions not of the round that just read the jobs (the engine's are): read them
            states = self.store.jobs(include_finished=False)
        held = {s.name: s.allocation for s in states if s.allocation}
        free = free_gpus(self.cluster, held)
        early = []
        for decision in decisions:
            if decision.kind == "start" and all(g <= f for g, f in zip(decision.allocation, free, strict=True)):
                early.append(decision)
                free = [f - g for f, g in zip(free, decision.allocation, strict=True)]
        for decision in early:
            self._start(decision)
        moving = {d.job: d for d in decisions if d.kind in ("stop", "resize")}
        codes = lifecycle.stop(list(moving)) if moving else {}
        if codes:
            crash_point("after-stop")
        for name, code in codes.items():
            decision = moving[name]
            why = (
                f"checkpointed to move to {num_gpus(decision.allocation)} GPU(s)"
                if decision.kind == "resize"
                else "preempted after checkpointing"
            )
            lifecycle.settle(name, code, lifecycle.clock(), stop_reason=why, reallocation=True)
            if self.store.job(name).status != "pending":
                lifecycle.wake()
        for decision in decisions:
            if decision not in early and decision.kind != "stop" and num_gpus(decision.allocation) > 0:
                self._start(decision)

    def _start(self, decision: Decision) -> None:
        """Launch a job at its new allocation, unless it finished or was cancelled while others were stopped."""
        lifecycle = self.lifecycle
        state = self.store.job(decision.job)
        if state.status in FINAL or state.cancel_requested:
            return
        if decision.gpu_type is None:
            raise ValueError(f"decision for job {decision.job!r} to hold GPUs names no GPU type")
        view = self.view(state, self.cluster, lifecycle.clock())
        lifecycle.launch(view, decision.allocation, decision.gpu_type, lifecycle.clock())
        state = self.store.job(decision.job)
        if state.status != "running":
            lifecycle.wake()
            return
        LOG.info(
            "job %s: launched %d worker(s) on %s, attempt %d, %s",
            state.name,
            num_gpus(state.allocation),
            state.allocation,
            state.attempts + 1,
            f"restart {state.restarts} ({lifecycle.job(state.name).relaunch})" if state.restarts else "first start",
        )
