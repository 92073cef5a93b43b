"""The per-process agent: process group, restore, adaptation, stop-checkpoint-exit and reporting (Pollux §4.1).

All of a job's agent state lives in one `AgentContext`, created by `init_process_group` and found by the model,
the loader and `remaining_epochs_until` through `current_agent()` (a context variable, like torch.distributed's
default group). Every decision that must be the same on all replicas (batch size, stopping) is made collectively:
rank 0 decides and broadcasts, or a flag is all-reduced, so replicas never disagree about what step comes next.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import json
import logging
import math
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import numpy as np
import torch
import torch.distributed as dist

from pollux.agent import environment
from pollux.agent.adapt import explored_limits, fit_measured
from pollux.agent.checkpoint import CheckpointStore
from pollux.agent.report import (
    BatchInUse,
    CheckpointInfo,
    JobReport,
    Progress,
    Status,
    ThroughputSample,
    write_report,
)
from pollux.agent.rng import capture_rng, restore_rng
from pollux.agent.steps import StepTiming, StepTracker
from pollux.errors import AgentError, CheckpointError
from pollux.goodput import (
    BatchConfig,
    GradientStats,
    ThroughputLog,
    ThroughputParams,
    decide_batch,
)

if TYPE_CHECKING:
    from pollux.agent.data import AdaptiveDataLoader
    from pollux.agent.parallel import AdaptiveDataParallel

LOG = logging.getLogger("pollux.agent")
T = TypeVar("T")

CHECKPOINT_FORMAT = 1
REPORT_INTERVAL_S = 2.0  # a running job rewrites its report at most this often (the scheduler polls far less)
# A throughput fit (a few ms of scipy) runs on a background thread of rank 0, started this many steps before the
# batch decision that uses it, so the replicas do not wait for it; the decision waits only if it is not done yet.
FIT_LEAD_STEPS = 5
# Periodic checkpoints bound what a crash (of a worker, a node, or everything) loses to one interval. Without a
# setting, the interval follows the measured cost of a save: at least AUTO_CHECKPOINT_MIN_S, and long enough that
# saving takes at most 1/AUTO_CHECKPOINT_COST_FACTOR of the time (1%; see benchmarks/kill_recovery for the costs).
AUTO_CHECKPOINT_MIN_S = 30.0
AUTO_CHECKPOINT_COST_FACTOR = 100.0
EXIT_CODE_STOPPED = 143  # 128 + SIGTERM, what a launcher expects from a worker it asked to stop
# The scheduler's variables (`pollux.agent.environment`, the one contract both sides import).
CHECKPOINT_INTERVAL_ENV = environment.CHECKPOINT_INTERVAL_S
GPU_TYPE_ENV = environment.GPU_TYPE
BOOTSTRAP_ENV = environment.THROUGHPUT_BOOTSTRAP
BOUNDS_ENV = environment.LOCAL_BSZ_BOUNDS
UNTYPED = "default"  # the key of what a job learns where nobody told it a GPU type (run without a scheduler)

_CURRENT: contextvars.ContextVar[AgentContext | None] = contextvars.ContextVar("pollux_agent", default=None)


def current_agent() -> AgentContext:
    """The agent of this process; raises if `init_process_group` has not been called."""
    agent = _CURRENT.get()
    if agent is None:
        raise AgentError(
            "pollux.agent is not initialised: call pollux.agent.init_process_group(...) before creating "
            "AdaptiveDataParallel or AdaptiveDataLoader, or iterating remaining_epochs_until"
        )
    return agent


def init_process_group(
    backend: str = "gloo",
    *,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    report_path: str | os.PathLike[str] | None = None,
    job_name: str | None = None,
    checkpoint_interval_s: float | None = None,
) -> AgentContext:
    """Join the job's process group and restore the latest good checkpoint, if any.

    World size, rank and rendezvous come from the launcher's environment as torchrun sets them (`RANK`,
    `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`, `LOCAL_RANK`); without them this is a one-process group.
    `checkpoint_dir` defaults to `$POLLUX_CHECKPOINT_DIR`, `report_path` to `$POLLUX_REPORT_PATH`, `job_name` to
    `$POLLUX_JOB_NAME`; without a checkpoint directory a stop request exits without saving.
    `checkpoint_interval_s` (default `$POLLUX_CHECKPOINT_INTERVAL_S`, else chosen from the measured cost of a save,
    see `AUTO_CHECKPOINT_MIN_S`) is how often training checkpoints on its own, between steps.
    """
    if _CURRENT.get() is not None:
        raise AgentError("init_process_group was already called in this process (call agent.close() first)")
    env = os.environ
    owns_group = not dist.is_initialized()
    if owns_group:
        if "MASTER_ADDR" in env and "WORLD_SIZE" in env:
            dist.init_process_group(backend, init_method="env://")
        elif int(env.get("WORLD_SIZE", "1")) > 1:
            raise AgentError(
                f"WORLD_SIZE={env['WORLD_SIZE']} but MASTER_ADDR/MASTER_PORT are not set: launch with torchrun, "
                "or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for every process"
            )
        else:
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if checkpoint_interval_s is None:
        checkpoint_interval_s = _interval_from_env(env.get(CHECKPOINT_INTERVAL_ENV))
    elif not (math.isfinite(checkpoint_interval_s) and checkpoint_interval_s > 0):
        raise AgentError(f"checkpoint_interval_s must be a number of seconds > 0, got {checkpoint_interval_s!r}")
    checkpoint_dir = checkpoint_dir or env.get(environment.CHECKPOINT_DIR) or None
    report_path = report_path or env.get(environment.REPORT_PATH) or None
    agent = AgentContext(
        rank=rank,
        world_size=world_size,
        local_rank=int(env.get("LOCAL_RANK", "0")),
        num_nodes=_count_nodes(world_size),
        checkpoint_dir=Path(checkpoint_dir) if checkpoint_dir else None,
        report_path=Path(report_path) if report_path else None,
        job_name=job_name or env.get(environment.JOB_NAME) or None,
        owns_group=owns_group,
        checkpoint_interval_s=checkpoint_interval_s,
    )
    agent.restore_checkpoint()
    agent.install_signal_handler()
    _CURRENT.set(agent)
    return agent


def remaining_epochs_until(epochs: int) -> Iterator[int]:
    """The epochs still to train, from the restored one on; between epochs a pending stop request checkpoints
    and exits 143."""
    agent = current_agent()
    agent.restore_rng_once()
    agent.declared_epochs = epochs
    while agent.epoch < epochs:
        yield agent.epoch
        agent.finish_epoch()
    agent.write_report("finished")


def _interval_from_env(value: str | None) -> float | None:
    """`$POLLUX_CHECKPOINT_INTERVAL_S`: seconds > 0, or unset/empty/"auto" for the cost-based default."""
    try:
        return environment.parse_interval(value)
    except ValueError as error:
        raise AgentError(str(error)) from None


def _report_samples(log: ThroughputLog) -> tuple[ThroughputSample, ...]:
    """One sample per configuration the job ran, with its median times, as the job report lists them."""
    found = log.samples()
    if found is None:
        return ()
    columns = (
        found.num_nodes,
        found.num_replicas,
        found.local_bsz,
        found.accum_steps,
        found.compute_time,
        found.step_time,
    )
    return tuple(
        ThroughputSample(int(n), int(k), int(m), int(s), float(c), float(t))
        for n, k, m, s, c, t in zip(*columns, strict=True)
    )


def _await_peers_closed(store: Any, rank: int, world_size: int, timeout_s: float = 10.0) -> None:
    """Rank 0 hosts the rendezvous store: it waits until every rank has destroyed its process group before going
    on (and exiting), so no rank's gloo threads lose the store under them while they shut down, which aborts that
    rank ("terminate called without an active exception"). Best effort: a peer that never says so is not waited
    for longer than `timeout_s`."""
    with contextlib.suppress(Exception):
        store.set(f"pollux/closed/{rank}", "1")
        if rank == 0:
            store.wait([f"pollux/closed/{r}" for r in range(world_size)], timedelta(seconds=timeout_s))


def _count_nodes(world_size: int) -> int:
    """Distinct hosts in the group (`$POLLUX_NUM_NODES` overrides): the N of the throughput model."""
    if environment.NUM_NODES in os.environ:
        return int(os.environ[environment.NUM_NODES])
    if world_size == 1:
        return 1
    hosts: list[Any] = [None] * world_size
    dist.all_gather_object(hosts, socket.gethostname())
    return len(set(hosts))


class AgentContext:
    """Everything the agent knows in one process. Created by `init_process_group`."""

    def __init__(
        self,
        rank: int,
        world_size: int,
        local_rank: int,
        num_nodes: int,
        checkpoint_dir: Path | None,
        report_path: Path | None,
        job_name: str | None,
        owns_group: bool,
        checkpoint_interval_s: float | None = None,
    ) -> None:
        self.rank, self.world_size, self.local_rank, self.num_nodes = rank, world_size, local_rank, num_nodes
        self.checkpoint_dir, self.report_path, self.job_name = checkpoint_dir, report_path, job_name
        self.tracker = StepTracker()
        # What it learns per GPU type (a job moved to another type keeps the others' and starts that one's anew)
        self.gpu_type: str | None = os.environ.get(GPU_TYPE_ENV) or None
        self.throughput_logs: dict[str, ThroughputLog] = {}
        self.params_by_type: dict[str, ThroughputParams] = {}  # last fit per type (rank 0 only)
        self.run_time_by_type_s: dict[str, float] = {}  # seconds trained on each type, before this incarnation
        self.bounds_by_type: dict[str, tuple[int, int]] = {}  # per-GPU batch bounds it ran with on each type
        self._type_since = time.monotonic()
        bootstrap = os.environ.get(BOOTSTRAP_ENV)
        if bootstrap:
            self.params_by_type[self.type_key] = _params_from_env(bootstrap)
        self.epoch = 0
        self.declared_epochs: int | None = None  # what the training loop declares (`remaining_epochs_until`)
        self.steps = 0  # optimizer steps over the whole job, across restarts
        self.examples = 0  # examples trained over the whole job
        self.m0_steps = 0.0  # statistical progress: Σ AdaScale gain per step
        self.restarts = 0
        self.started_at_s = time.time()
        self.stop_requested_locally = False  # set by SIGTERM or request_stop(), on this process only
        self.stop_agreed = False  # set once every replica knows some replica was asked to stop
        self.checkpoint_interval_setting_s = checkpoint_interval_s  # None: follow the measured save cost
        self.checkpoint_agreed = False  # set when every replica knows a periodic checkpoint fell due somewhere
        self.last_save_s: float | None = None  # wall time of the last checkpoint (all ranks wait for it)
        self.saved_at_s: float | None = None  # when the newest checkpoint of the job was written (time.time())
        self.restored_from: Path | None = None  # the checkpoint this process resumed from
        self.restored_saved_at_s: float | None = None  # when that checkpoint was written (time.time())
        self.model: AdaptiveDataParallel | None = None
        self.loader: AdaptiveDataLoader | None = None  # the training loader (the first one created)
        self._owns_group = owns_group
        self._store = CheckpointStore(checkpoint_dir) if checkpoint_dir else None
        self._restored: dict[str, Any] = {}
        self._rng_pending: list[dict[str, Any]] | None = None
        self._previous_sigterm: Any = None
        self._warned_no_store = False
        self._fitted_at = -float("inf")  # time.monotonic() of the last throughput fit started (rank 0)
        self._background: ThreadPoolExecutor | None = None  # rank 0: fits and report writes, off the training thread
        self._fit: tuple[str, Future[ThroughputParams]] | None = None  # (GPU type, the fit in flight)
        self._report_write: Future[Any] | None = None
        self._background_in_step = False  # rank 0: background work ran during the current step (see after_step)
        self._checkpointed_at: float | None = None  # of the last save, or of the first step (start-up is not work)
        self._reported_at = -float("inf")

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def type_key(self) -> str:
        """The GPU type this incarnation runs on, as its samples and fits are keyed."""
        return self.gpu_type or UNTYPED

    @property
    def throughput_log(self) -> ThroughputLog:
        """The step times measured on this GPU type (read every step: no new log built unless it is missing)."""
        key = self.type_key
        log = self.throughput_logs.get(key)
        if log is None:
            log = self.throughput_logs[key] = ThroughputLog()
        return log

    @property
    def throughput_params(self) -> ThroughputParams | None:
        """The throughput model of this GPU type: fitted here, else the scheduler's bootstrap, else None."""
        return self.params_by_type.get(self.type_key)

    @throughput_params.setter
    def throughput_params(self, params: ThroughputParams | None) -> None:
        if params is None:
            self.params_by_type.pop(self.type_key, None)
        else:
            self.params_by_type[self.type_key] = params

    def run_time_by_type(self) -> dict[str, float]:
        """Seconds trained on each GPU type, this incarnation included."""
        times = dict(self.run_time_by_type_s)
        times[self.type_key] = times.get(self.type_key, 0.0) + time.monotonic() - self._type_since
        return times

    def type_bounds(self, bounds: tuple[int, int]) -> tuple[int, int]:
        """The per-GPU batch bounds on this GPU type: the scheduler's for it where it sends them (memory), else the
        script's."""
        told = os.environ.get(BOUNDS_ENV)
        if not told:
            return bounds
        try:
            return environment.parse_bounds(told)
        except ValueError as error:
            raise AgentError(str(error)) from None

    # -- components and restore ------------------------------------------------------------------------------

    def restored_state(self, name: str) -> dict[str, Any] | None:
        """The checkpointed state of component `name` (None on a fresh start)."""
        return self._restored.get(name)

    def attach_model(self, model: AdaptiveDataParallel) -> None:
        if self.model is not None:
            raise AgentError("one AdaptiveDataParallel per process: this agent already has a model")
        self.model = model

    def attach_loader(self, loader: AdaptiveDataLoader) -> None:
        if self.loader is None:
            self.loader = loader

    def restore_checkpoint(self) -> None:
        """Load the newest good checkpoint (every rank reads the same file), whatever world size wrote it."""
        if self._store is None:
            return
        loaded = self._store.load_latest()
        if loaded is not None:
            try:
                payload = torch.load(io.BytesIO(loaded.payload), weights_only=True)
            except Exception as exc:  # a valid checksum over an unloadable payload: written by something else
                raise CheckpointError(f"{loaded.path}: checksum is fine but torch.load fails ({exc})") from exc
            if payload.get("format") != CHECKPOINT_FORMAT:
                raise CheckpointError(
                    f"{loaded.path}: checkpoint format {payload.get('format')!r}, this agent reads {CHECKPOINT_FORMAT}"
                )
            state = payload["agent"]
            self.epoch, self.steps, self.examples = int(state["epoch"]), int(state["steps"]), int(state["examples"])
            self.m0_steps, self.restarts = float(state["m0_steps"]), int(state["restarts"]) + 1
            self._restore_typed(state)
            self._restored = payload["components"]
            self._rng_pending = payload["rng"]
            self.restored_from, self.restored_saved_at_s = loaded.path, float(payload.get("saved_at_s", 0.0))
            self.saved_at_s = self.restored_saved_at_s
            if self.rank == 0:
                LOG.info(
                    "restored %s: epoch %d, step %d (saved by %d replicas, now %d)",
                    loaded.path,
                    self.epoch,
                    self.steps,
                    payload["world_size"],
                    self.world_size,
                )
        if self.distributed:
            dist.barrier()  # nobody writes a new checkpoint while another rank still reads

    def _restore_typed(self, state: dict[str, Any]) -> None:
        """What the job learnt per GPU type; a checkpoint written before types holds one log (`throughput_log`),
        from a one-type cluster: it is taken as this type's."""
        logs = state.get("throughput_logs") or {self.type_key: state["throughput_log"]}
        for key, log_state in logs.items():
            self.throughput_logs.setdefault(key, ThroughputLog()).load_state_dict(log_state)
        for key, values in (state.get("params_by_type") or {}).items():  # a fit wins over a bootstrap
            self.params_by_type[key] = ThroughputParams.from_array(np.array(values, dtype=float))
        self.run_time_by_type_s = {k: float(v) for k, v in (state.get("run_time_by_type_s") or {}).items()}
        self.bounds_by_type = {k: (int(b[0]), int(b[1])) for k, b in (state.get("bounds_by_type") or {}).items()}
        self._type_since = time.monotonic()

    def restore_rng_once(self) -> None:
        """Restore random generators when training resumes (not at init: building the model draws from them)."""
        if self._rng_pending is not None:
            restore_rng(self._rng_pending, self.rank)
            self._rng_pending = None

    # -- adaptation -------------------------------------------------------------------------------------------

    def grad_stats(self) -> GradientStats | None:
        loader = self.loader
        if self.model is None or loader is None:
            return None
        return self.model.noise.grad_stats(loader.batch_size)

    def refit_throughput(self, min_interval_s: float) -> None:
        """Rank 0: refit the throughput model now if `min_interval_s` has passed since the last fit (a fit costs a
        few milliseconds that every replica waits for; step times drift slowly, so a fit every few seconds
        suffices), after adopting any fit started in the background."""
        self.collect_refit()
        self.start_refit(min_interval_s)
        self.collect_refit()

    def start_refit(self, min_interval_s: float) -> None:
        """Rank 0: start a throughput fit on the background thread, on the step times logged so far, if
        `min_interval_s` has passed since the last one started and none is in flight."""
        now = time.monotonic()
        if self._fit is not None or (self.throughput_params is not None and now - self._fitted_at < min_interval_s):
            return
        samples = self.throughput_log.samples()
        if samples is None:
            return
        self._fit = (self.type_key, self._submit(fit_measured, samples, self.throughput_params))
        self._fitted_at = now

    def collect_refit(self, wait: bool = True) -> None:
        """Rank 0: adopt the fit in flight, if any, waiting for it unless `wait` is False (then only a finished one);
        a degenerate fit must not kill the job: the previous one is kept."""
        fit = self._fit
        if fit is None or not (wait or fit[1].done()):
            return
        self._fit = None
        key, future = fit
        try:
            self.params_by_type[key] = future.result()
        except ValueError as exc:
            LOG.warning("throughput fit failed (%s); keeping the previous fit", exc)

    def _submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        if self._background is None:
            self._background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pollux-agent")
        self._background_in_step = True
        return self._background.submit(fn, *args)

    def _background_running(self) -> bool:
        fit, write = self._fit, self._report_write  # asked every step: plain tests, no generator
        return (fit is not None and not fit[1].done()) or (write is not None and not write.done())

    def _step_was_undisturbed(self) -> bool:
        """Rank 0: whether no fit or report write ran during the step that just ended, and restart the check for
        the next one. Background work competes with training for the GIL and the CPU (a fit from scratch slowed
        5 steps of 10 ms by 3-34 ms each on 2 cores), so the steps it overlaps would bias the throughput profile
        it fits. Work is only submitted at step boundaries, so: running now, or submitted since the last one."""
        running = self._background_running()
        undisturbed = not (running or self._background_in_step)
        self._background_in_step = running
        return undisturbed

    def decide_batch(self, loader: AdaptiveDataLoader) -> bool:
        """Collective: rank 0 picks (m, s) for the current allocation from its latest fit, everyone adopts it.
        Returns whether the configuration changed."""
        limits = loader.limits
        if limits is None:
            return False
        choice = torch.zeros(2, dtype=torch.int64)
        if self.rank == 0:
            self.refit_throughput(loader.refit_interval_s)
            limits = explored_limits(limits, self.throughput_log.max_replica_batch, self.world_size)
            decision = decide_batch(limits, self.throughput_params, self.grad_stats(), self.num_nodes, self.world_size)
            config = decision.config
            choice[0], choice[1] = config.local_bsz, config.accum_steps
        if self.distributed:
            dist.broadcast(choice, src=0)
        new = BatchConfig(int(choice[0]), int(choice[1]))
        changed = new != loader.config
        if changed and self.rank == 0:
            LOG.info(
                "batch size %d -> %d (local %d, accumulation %d) on %d replicas",
                loader.config.total(self.world_size),
                new.total(self.world_size),
                new.local_bsz,
                new.accum_steps,
                self.world_size,
            )
        loader.config = new
        return changed

    def after_step(self, loader: AdaptiveDataLoader, timing: StepTiming, warm: bool) -> bool:
        """At a step boundary (called by the loader): log the step's time, stop if asked, adapt every few steps.
        Returns whether the loader must re-plan with a new batch configuration."""
        if not self.tracker.stepped:
            return False  # no optimizer step (an evaluation loop): nothing to measure or decide
        if self._checkpointed_at is None:
            self._checkpointed_at = time.monotonic()  # the periodic clock starts with training, not with start-up
        config = (self.num_nodes, self.world_size, loader.current_local_bsz, timing.micro_steps - 1)
        undisturbed = self.rank != 0 or self._step_was_undisturbed()
        if timing.full and not warm and (undisturbed or config not in self.throughput_log):
            self.throughput_log.record(*config, timing.compute_s, timing.step_s)
        mid_epoch = loader.position < len(loader.dataset)  # at the end, finish_epoch stops or saves
        if self.stop_agreed and mid_epoch:
            self.checkpoint_and_exit()
        if mid_epoch and self._periodic_checkpoint_agreed():
            self.save_checkpoint()
        if self.rank == 0 and (self.steps + FIT_LEAD_STEPS) % loader.adapt_interval_steps == 0:
            self.start_refit(loader.refit_interval_s)
        if self.steps % loader.adapt_interval_steps != 0:
            return False
        changed = self.decide_batch(loader)
        if self.rank == 0 and time.monotonic() - self._reported_at >= REPORT_INTERVAL_S:
            if loader.limits is None:  # a fixed batch: the fit is only for the report, so never wait for it
                self.collect_refit(wait=False)
                self.start_refit(loader.refit_interval_s)
            self.write_report("running")
        return changed

    # -- stopping and checkpoints -----------------------------------------------------------------------------

    def install_signal_handler(self) -> None:
        """SIGTERM asks to stop after the current step (the handler only sets a flag; the loop does the rest)."""
        try:
            self._previous_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)
        except ValueError:  # not the main thread: the job can still stop through request_stop()
            LOG.warning("not in the main thread: SIGTERM will not trigger a checkpoint (use agent.request_stop())")

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.stop_requested_locally = True

    def request_stop(self) -> None:
        """Ask the job to checkpoint and exit 143 at the next step boundary (as SIGTERM does)."""
        self.stop_requested_locally = True

    @property
    def checkpoint_interval_s(self) -> float:
        """Seconds between periodic checkpoints: the setting, else from the measured cost of the last save."""
        if self.checkpoint_interval_setting_s is not None:
            return self.checkpoint_interval_setting_s
        return max(AUTO_CHECKPOINT_MIN_S, AUTO_CHECKPOINT_COST_FACTOR * (self.last_save_s or 0.0))

    def checkpoint_due(self) -> bool:
        """This process's own clock says a periodic checkpoint is due (only with somewhere to save it)."""
        since = self._checkpointed_at
        return self._store is not None and since is not None and time.monotonic() - since >= self.checkpoint_interval_s

    def _periodic_checkpoint_agreed(self) -> bool:
        """Whether every replica saves now: agreed through the statistics exchange when distributed (so all of
        them are at the same step), this process's clock otherwise."""
        return self.checkpoint_agreed if self.distributed else self.checkpoint_due()

    def agree_stop(self) -> bool:
        """Collective: whether any replica has been asked to stop (and, on the way, whether a periodic
        checkpoint fell due on any)."""
        if self.model is not None:
            self.model.flush_statistics()
        flag = self.stop_requested_locally or self.stop_agreed
        if self.distributed and self.model is None:  # no exchange carried the flags: share them here
            tensor = torch.tensor([float(flag), float(self.checkpoint_due())])
            dist.all_reduce(tensor)
            flag, self.checkpoint_agreed = bool(tensor[0].item() > 0), bool(tensor[1].item() > 0)
        elif self.distributed:
            tensor = torch.tensor([float(flag)])
            dist.all_reduce(tensor)
            flag = bool(tensor.item() > 0)
        self.stop_agreed = flag
        return flag

    def finish_epoch(self) -> None:
        self.epoch += 1
        if self.agree_stop():
            self.checkpoint_and_exit()
        if self._periodic_checkpoint_agreed():
            self.save_checkpoint()

    def save_checkpoint(self) -> Path | None:
        """Collective: rank 0 writes model, optimizer, scheduler, loader position, epoch, measurement history and
        every rank's RNG state into one new checkpoint file; all ranks wait until it is on disk. Restarts the
        periodic-checkpoint clock on every rank and measures what the save cost."""
        started = time.monotonic()
        if self.model is not None:
            self.model.flush_statistics()  # the last step's statistics belong in the checkpoint
        rng = capture_rng()
        gathered: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        if self.distributed:
            dist.gather_object(rng, gathered, dst=0)
        elif gathered is not None:
            gathered[0] = rng
        path = None
        if self.rank == 0:
            if self._store is None:
                if not self._warned_no_store:
                    LOG.warning("no checkpoint directory (set POLLUX_CHECKPOINT_DIR): nothing saved")
                    self._warned_no_store = True
            else:
                components: dict[str, Any] = {}
                if self.model is not None:
                    components[self.model.checkpoint_name] = self.model.checkpoint_state()
                if self.loader is not None:
                    components[self.loader.name] = self.loader.state_dict()
                saved_at_s = time.time()
                payload = {
                    "format": CHECKPOINT_FORMAT,
                    "world_size": self.world_size,
                    "saved_at_s": saved_at_s,
                    "agent": {
                        "epoch": self.epoch,
                        "steps": self.steps,
                        "examples": self.examples,
                        "m0_steps": self.m0_steps,
                        "restarts": self.restarts,
                        "throughput_logs": {k: log.state_dict() for k, log in self.throughput_logs.items()},
                        "params_by_type": {k: p.to_array().tolist() for k, p in self.params_by_type.items()},
                        "run_time_by_type_s": self.run_time_by_type(),
                        "bounds_by_type": {k: list(b) for k, b in self._bounds_by_type_now().items()},
                    },
                    "components": components,
                    "rng": gathered,
                }
                buffer = io.BytesIO()
                torch.save(payload, buffer)
                path = self._store.save(buffer.getvalue())
                self.saved_at_s = saved_at_s
                LOG.info("checkpoint saved to %s (epoch %d, step %d)", path, self.epoch, self.steps)
        if self.distributed:
            dist.barrier()
        self._checkpointed_at = time.monotonic()
        self.last_save_s = self._checkpointed_at - started
        if self.rank == 0 and path is not None:
            LOG.info("checkpoint took %.4f s; next in %.0f s", self.last_save_s, self.checkpoint_interval_s)
        self.checkpoint_agreed = False  # the flush above completed every exchange that could still ask for one
        return path

    def checkpoint_and_exit(self) -> NoReturn:
        """Collective: save, report "stopped", leave the process group and exit with status 143.

        It leaves by `exit_process`, not `SystemExit`: the checkpoint and the report are written, and the
        interpreter's teardown is where gloo's threads can abort a rank (exit -6) that stopped cleanly."""
        if self.rank == 0:  # the checkpoint and the report carry the model of this type as measured to the end
            LOG.info("stop requested: checkpointing at epoch %d, step %d, then exiting", self.epoch, self.steps)
            self.refit_throughput(0.0)
        self.save_checkpoint()
        self.write_report("stopped")
        self.close()
        exit_process(EXIT_CODE_STOPPED)

    # -- reporting --------------------------------------------------------------------------------------------

    def build_report(self, status: Status) -> JobReport | None:
        loader = self.loader
        if loader is None:
            return None
        k = self.world_size
        m0 = loader.batch_size
        limits = loader.limits
        if limits is not None:
            max_batch, bounds, accumulation = limits.max_batch_size, limits.local_bsz_bounds, limits.accumulation
        else:
            max_batch, bounds, accumulation = m0, (loader.current_local_bsz, loader.current_local_bsz), False
        return JobReport(
            status=status,
            job_name=self.job_name,
            started_at_s=self.started_at_s,
            written_at_s=time.time(),
            init_batch_size=m0,
            max_batch_size=max_batch,
            local_bsz_bounds=bounds,
            gradient_accumulation=accumulation,
            adaptive_batch_size=limits is not None,
            throughput_params=self.throughput_params,
            grad_stats=self.grad_stats(),
            batch=BatchInUse(self.num_nodes, k, loader.current_local_bsz, loader.accum_steps),
            progress=Progress(
                epoch=self.epoch,
                epoch_examples=loader.position if loader.epoch == self.epoch else 0,
                epoch_size=len(loader.dataset),
                steps=self.steps,
                examples=self.examples,
                m0_steps=self.m0_steps,
                epochs=self.declared_epochs,
            ),
            max_replicas_seen=max(max((log.max_replicas for log in self.throughput_logs.values()), default=0), k),
            throughput_configs=sum(len(log) for log in self.throughput_logs.values()),
            restarts=self.restarts,
            checkpoint=CheckpointInfo(self.saved_at_s, self.last_save_s, self.checkpoint_interval_s),
            gpu_type=self.gpu_type,
            throughput_params_by_type=dict(self.params_by_type),
            local_bsz_bounds_by_type=self._bounds_by_type_now(),
            run_time_by_type_s=self.run_time_by_type(),
            throughput_samples_by_type={k: _report_samples(log) for k, log in self.throughput_logs.items() if len(log)},
        )

    def _bounds_by_type_now(self) -> dict[str, tuple[int, int]]:
        """The per-GPU batch bounds used on each type, this one's from the loader's limits."""
        bounds = dict(self.bounds_by_type)
        loader = self.loader
        if loader is not None and loader.limits is not None:
            bounds[self.type_key] = loader.limits.local_bsz_bounds
        return bounds

    def write_report(self, status: Status) -> None:
        """Rank 0 rewrites the report file atomically (if a report path is set). A running job's report is written
        on the background thread (skipped while the previous one is still being written); a final one here, after
        any write still in flight, so nothing overwrites it."""
        if self.rank != 0 or self.report_path is None:
            return
        loader = self.loader
        if status != "running" and loader is not None and loader.limits is None:
            self.refit_throughput(loader.refit_interval_s)  # a fixed batch's last report waits for its fit
        report = self.build_report(status)
        if report is None:
            return
        self._reported_at = time.monotonic()
        previous = self._report_write
        if status == "running":
            if previous is None or previous.done():
                if previous is not None:
                    previous.result()  # a failed write raises here, as it would have in the loop
                self._report_write = self._submit(write_report, self.report_path, report)
            return
        if previous is not None:
            self._report_write = None
            previous.result()
        write_report(self.report_path, report)

    # -- teardown ---------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Forget this agent: restore the SIGTERM handler, leave the process group if init created it."""
        if self._previous_sigterm is not None:
            with contextlib.suppress(ValueError):  # not the main thread
                signal.signal(signal.SIGTERM, self._previous_sigterm)
            self._previous_sigterm = None
        if self._background is not None:
            self._background.shutdown(wait=True)  # a report still being written is finished
            self._background, self._fit, self._report_write = None, None, None
        model = self.model
        if model is not None:
            model.detach_agent()
        self.model = self.loader = None  # the loader refers back to this agent: no cycle may keep the model alive
        if _CURRENT.get() is self:
            _CURRENT.set(None)
        if self._owns_group and dist.is_initialized():
            store = None
            if self.distributed:
                dist.barrier()
                with contextlib.suppress(Exception):
                    store = dist.distributed_c10d._get_default_store()
            dist.destroy_process_group()
            self._owns_group = False
            if store is not None:
                _await_peers_closed(store, self.rank, self.world_size)
            if model is not None:
                model.release_process_group()  # the group ends now, not in the interpreter's teardown


def _params_from_env(text: str) -> ThroughputParams:
    """The bootstrap model the scheduler sends (`BOOTSTRAP_ENV`): JSON of the report's `throughput_params`."""
    try:
        values = json.loads(text)
        return ThroughputParams(**{k: float(v) for k, v in values.items()})
    except (ValueError, TypeError, AttributeError) as exc:
        raise AgentError(
            f"{BOOTSTRAP_ENV}: not a throughput model ({exc}); unset it or send the report's format"
        ) from exc


def exit_process(status: int = 0) -> NoReturn:
    """End a training process once its agent is closed: flush the standard streams and logging, then leave by
    `os._exit`, skipping the interpreter's final teardown.

    Why: after training has finished and the process group is destroyed, the teardown can still abort the process
    (`terminate called without an active exception`, exit -6 / 134) while torch's gloo threads are torn down; a
    launcher then reads a job that completed as a crash. Everything the job writes is written before this (files it
    opened should be closed or flushed); only the teardown is skipped. Call it last, as a training script's
    `main(); pa.exit_process()`."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    logging.shutdown()
    os._exit(status)
