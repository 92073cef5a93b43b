"""`AdaptiveDataParallel`: DistributedDataParallel that measures, scales its LR and survives restarts (Pollux §3).

Wrapping the model also wraps the optimizer (and LR scheduler) so the user's loop stays ordinary PyTorch:

- `optimizer.step()` after a non-final accumulation micro-batch does nothing; after the final one it averages the
  accumulated gradient, updates the noise-scale estimate (pollux.agent.gradients, pollux.agent.gns), multiplies the
  LR by the scaling rule's factor for this one step, and counts progress in M0-steps with the AdaScale gain.
- `optimizer.zero_grad()` and `lr_scheduler.step()` do nothing in the middle of an accumulating step.
  (The optimizer's methods are replaced on the instance, keeping the LR scheduler's step-order marker; the
  scheduler's class is swapped for a subclass instead, because LRScheduler.state_dict() saves every instance
  attribute and a method there would not pickle.)
- forward() switches DDP's gradient synchronisation off for non-final micro-batches (what `no_sync()` does).
- A hook on every parameter takes the norm of its local gradient and marks the time; the last one ends the
  compute part of the step, the rest until the step ends is sync (pollux.agent.steps).
"""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from pollux.agent.context import AgentContext, current_agent
from pollux.agent.exchange import StatisticsExchange
from pollux.agent.gns import NoiseScaleEstimator
from pollux.agent.gradients import GradientMeter
from pollux.agent.scaling import AdaScale, ScalingRule
from pollux.errors import AgentError
from pollux.goodput import GradientStats, noise_scale


class AdaptiveDataParallel(DistributedDataParallel):
    """DDP for a job whose batch size, LR and replica count change while it trains.

    `scaling_rule` defaults to `AdaScale()`. `gns_smoothing` is the EMA factor per M0-batch of examples for the
    gradient statistics; `statistics_interval_steps` how many steps the replicas pool before exchanging them (and
    a stop request), None (the default) as many as take about 0.2 s, see pollux.agent.exchange;
    `measure_every_steps`: the gradients' norms are taken on one step in that many (two in a row where one gradient
    per step is paired with the previous one). The estimate is an average over hundreds of steps, so measuring all
    of them buys little precision for its cost: a norm per parameter per step is the largest part of the agent's
    work in a short step. Other keyword arguments go to `DistributedDataParallel`. Construct it after
    `init_process_group`: on a restart it loads the checkpointed model, optimizer and scheduler.
    """

    def __init__(
        self,
        module: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        lr_scheduler: Any = None,
        scaling_rule: ScalingRule | None = None,
        *,
        name: str = "model",
        gns_smoothing: float = 0.999,
        statistics_interval_steps: int | None = None,
        measure_every_steps: int = 4,
        agent: AgentContext | None = None,
        **ddp_kwargs: Any,
    ) -> None:
        agent = agent or current_agent()
        restored = agent.restored_state(name)
        if restored is not None:
            module.load_state_dict(restored["module"])  # before DDP broadcasts rank 0's parameters
        super().__init__(module, **ddp_kwargs)
        self._agent: AgentContext | None = agent
        self.checkpoint_name = name
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.scaling_rule = scaling_rule if scaling_rule is not None else AdaScale()
        self.noise = NoiseScaleEstimator(gns_smoothing)
        self.last_lr_factor = 1.0
        self._progress_gain = AdaScale()  # progress in M0-steps is the AdaScale gain, whatever rule scales the LR
        if measure_every_steps < 1:
            raise AgentError(f"measure_every_steps must be >= 1, got {measure_every_steps}")
        self.measure_every_steps = measure_every_steps
        self._meter = GradientMeter(module.parameters(), optimizer, agent.tracker)
        device = next((p.device for p in self._meter.params), torch.device("cpu"))
        self._exchange = StatisticsExchange(
            self.noise, statistics_interval_steps, distributed=agent.distributed, device=device
        )

        self._inner_step = optimizer.step
        self._inner_zero_grad = optimizer.zero_grad
        optimizer.step = _forward_to(self._step, self._inner_step)  # type: ignore[method-assign]
        optimizer.zero_grad = _forward_to(self._zero_grad, self._inner_zero_grad)  # type: ignore[method-assign]
        self._scheduler_seen_steps = 0
        self._scheduler_class: type | None = None
        if lr_scheduler is not None:
            self._scheduler_class = _hold_scheduler_while_accumulating(lr_scheduler, self)

        if restored is not None:
            optimizer.load_state_dict(restored["optimizer"])
            if lr_scheduler is not None and restored.get("lr_scheduler") is not None:
                lr_scheduler.load_state_dict(restored["lr_scheduler"])
            self.noise.load_state_dict(restored["noise"])
            self._meter.optimizer_stepped()
        agent.attach_model(self)

    # -- what the user sees -----------------------------------------------------------------------------------

    @property
    def agent(self) -> AgentContext:
        if self._agent is None:
            raise AgentError("this AdaptiveDataParallel's agent was closed (agent.close())")
        return self._agent

    @property
    def grad_stats(self) -> GradientStats | None:
        """Current gradient statistics at M0 (None before the first measurement)."""
        loader = self.agent.loader
        return None if loader is None else self.noise.grad_stats(loader.batch_size)

    @property
    def noise_scale(self) -> float | None:
        """φ = tr(Σ)/|g|² in examples (None before the first measurement)."""
        stats, loader = self.grad_stats, self.agent.loader
        return None if stats is None or loader is None else noise_scale(stats, loader.batch_size)

    @property
    def current_lr_factor(self) -> float:
        """The LR factor a full step at the loader's current batch size gets with the statistics measured so far:
        the one to show. (`last_lr_factor` is the latest step's; after an epoch that is its shorter tail step's,
        e.g. x0.04 for a last step of 1 example where M0 = 32.)"""
        loader = self.agent.loader
        if loader is None:
            return self.last_lr_factor
        return float(self.scaling_rule.lr_factor(loader.current_batch_size, loader.batch_size, self.grad_stats))

    @property
    def progress(self) -> float:
        """Statistical progress in M0-steps (AdaScale's scale-invariant iterations): drive schedules with it."""
        return self.agent.m0_steps

    def checkpoint_state(self) -> dict[str, Any]:
        return {
            "module": self.module.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "lr_scheduler": None if self.lr_scheduler is None else self.lr_scheduler.state_dict(),
            "noise": self.noise.state_dict(),
        }

    def detach_agent(self) -> None:
        """Called by `agent.close()`: from now on this is plain DDP. The optimizer's and the scheduler's own
        methods come back, so nothing of theirs refers to this model any more: without that reference cycle the
        model (and through DDP the process group) is freed when the training script drops it, while Python still
        runs, not by the interpreter's final teardown, where freeing gloo's pending work aborts the process
        ("terminate called without an active exception", exit 134)."""
        if self._agent is not None and self._agent.distributed:
            self._exchange.finish()
        self._agent = None
        self._meter.remove()
        self.optimizer.step = self._inner_step  # type: ignore[method-assign]
        self.optimizer.zero_grad = self._inner_zero_grad  # type: ignore[method-assign]
        if self.lr_scheduler is not None and self._scheduler_class is not None:
            self.lr_scheduler.__class__ = self._scheduler_class
            self._scheduler_class = None

    def release_process_group(self) -> None:
        """Called by `agent.close()` once the process group is destroyed: drop DDP's own references to it (its
        reducer and logger hold it), so the C++ group and gloo's threads end now, while Python runs, and not in
        the interpreter's final teardown. The model still runs forward passes without gradients synchronised."""
        for name in ("reducer", "logger", "process_group"):
            if hasattr(self, name):
                setattr(self, name, None)
        self.require_backward_grad_sync = False

    # -- the wrapped calls ------------------------------------------------------------------------------------

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        agent = self._agent
        micro = None if agent is None else agent.tracker.micro
        if agent is not None and micro is not None and torch.is_grad_enabled():
            tracker = agent.tracker
            if self.require_backward_grad_sync != micro.ends_step:  # nn.Module's __setattr__ is slow: only changes
                self.require_backward_grad_sync = micro.ends_step
            tracker.forward_seen = True
            self._meter.collecting = tracker.multi_gradient and self._measures(agent.steps) and self._meter.ready
        else:  # outside the training loop: plain DDP (a user's own no_sync() is left alone)
            self._meter.collecting = False
        return super().forward(*inputs, **kwargs)

    def _zero_grad(self, *args: Any, **kwargs: Any) -> None:
        tracker = None if self._agent is None else self._agent.tracker
        if tracker is not None and tracker.micro is not None and tracker.forward_seen and not tracker.stepped:
            return  # mid-accumulation: these gradients are still being summed
        self._inner_zero_grad(*args, **kwargs)

    def scheduler_may_step(self) -> bool:
        """False in the middle of an accumulating step: the optimizer has not stepped since the scheduler did."""
        tracker = None if self._agent is None else self._agent.tracker
        if tracker is None or tracker.micro is None:
            return True
        if tracker.optimizer_steps == self._scheduler_seen_steps:
            return False
        self._scheduler_seen_steps = tracker.optimizer_steps
        return True

    def _measures(self, step: int) -> bool:
        """Whether the gradients of optimizer step `step` (counted from 0) are measured: the last of every
        `measure_every_steps`, and the one before it where one gradient per step is paired with the previous."""
        phase, every = step % self.measure_every_steps, self.measure_every_steps
        tracker = self.agent.tracker
        return phase == every - 1 or (not tracker.multi_gradient and phase == every - 2)

    def _step(self, *args: Any, **kwargs: Any) -> Any:
        agent = self._agent
        tracker = None if agent is None else agent.tracker
        if agent is None or tracker is None or tracker.micro is None:
            return self._inner_step(*args, **kwargs)  # outside an AdaptiveDataLoader loop: a plain step
        micro = tracker.micro
        if not micro.ends_step or tracker.stepped:
            return None
        micro_steps = micro.micro_index + 1
        if micro_steps > 1:  # accumulated sum -> mean over the step's micro-batches
            torch._foreach_div_([p.grad for p in self._meter.params if p.grad is not None], micro_steps)
        batch_size = tracker.step_examples
        init_batch_size = tracker.init_batch_size
        self._measure(agent, micro_steps, batch_size, init_batch_size, tracker.num_examples, tracker.step_full)

        stats = self.noise.grad_stats(init_batch_size)
        factor = float(self.scaling_rule.lr_factor(batch_size, init_batch_size, stats))
        if not (math.isfinite(factor) and factor > 0):
            raise AgentError(f"{self.scaling_rule!r}.lr_factor returned {factor}; it must be finite and > 0")
        groups = self.optimizer.param_groups
        base_lrs = [group["lr"] for group in groups]
        for group, lr in zip(groups, base_lrs, strict=True):
            group["lr"] = lr * factor
        try:
            result = self._inner_step(*args, **kwargs)
        finally:
            for group, lr in zip(groups, base_lrs, strict=True):
                group["lr"] = lr
        object.__setattr__(self, "last_lr_factor", factor)  # a float: nn.Module's slower __setattr__ has no say
        agent.m0_steps += self._progress_gain.lr_factor(batch_size, init_batch_size, stats)
        agent.steps += 1
        agent.examples += batch_size
        self._meter.optimizer_stepped()
        tracker.stepped = True
        tracker.optimizer_steps += 1
        return result

    def _measure(
        self,
        agent: AgentContext,
        micro_steps: int,
        batch_size: int,
        init_batch_size: int,
        num_examples: int,
        full: bool,
    ) -> None:
        """Add this step's gradient statistics to the noise-scale estimate's window, and learn whether any replica
        must stop. Nothing is read back from the device here (pollux.agent.exchange reads once per window).

        Every replica computes the same numbers: the local sums are all-reduced (pollux.agent.exchange), and the
        averaged gradient is bitwise the same everywhere (DDP relies on that too), so LR factors never drift apart.
        """
        meter = self._meter
        local_norms = meter.take_local_norms()
        # a sampled step, not a partial one, nor one while Adam's denominators still settle
        measure = full and self._measures(agent.steps) and meter.ready
        pre = meter.preconditioned_grads() if measure else []
        measured = None
        if pre and (agent.distributed or micro_steps > 1):
            measured = (meter.step_sqr_norms(local_norms, pre), float(micro_steps), batch_size)
        elif pre:  # one gradient per step: pair it with the previous
            pair = meter.consecutive_pair(pre, batch_size)
            measured = None if pair is None else (pair, 2.0, 2 * batch_size)
        if not agent.distributed:
            agent.stop_agreed = agent.stop_agreed or agent.stop_requested_locally
            if not pre:
                meter.forget_previous()
            self._exchange.add_step(False, False, batch_size, init_batch_size, num_examples, micro_steps, measured)
            return
        stop, due = agent.stop_requested_locally, agent.checkpoint_due()
        self._exchange.add_step(stop, due, batch_size, init_batch_size, num_examples, micro_steps, measured)
        agent.stop_agreed = agent.stop_agreed or self._exchange.stop_agreed
        agent.checkpoint_agreed = agent.checkpoint_agreed or self._exchange.take_checkpoint_agreed()

    def flush_statistics(self) -> None:
        """Collective: apply every step's statistics still pooled or being exchanged, agree on stop and checkpoint
        requests."""
        agent = self._agent
        if agent is None:
            return
        if not agent.distributed:
            self._exchange.flush(False, False)
            return
        self._exchange.flush(agent.stop_requested_locally, agent.checkpoint_due())
        agent.stop_agreed = agent.stop_agreed or self._exchange.stop_agreed
        agent.checkpoint_agreed = agent.checkpoint_agreed or self._exchange.take_checkpoint_agreed()


def _forward_to(wrapper: Callable[..., Any], inner: Callable[..., Any]) -> Callable[..., Any]:
    """A plain function calling `wrapper`, marked like `inner` where torch's LR scheduler marked it (it warns when
    it finds optimizer.step replaced by something it did not wrap; the inner call still sets its flag)."""

    @functools.wraps(inner)
    def forward(*args: Any, **kwargs: Any) -> Any:
        return wrapper(*args, **kwargs)

    return forward


def _hold_scheduler_while_accumulating(scheduler: Any, model: AdaptiveDataParallel) -> type:
    """Make `scheduler.step()` a no-op while `model.scheduler_may_step()` says no; returns the scheduler's own class
    (`detach_agent` puts it back). The model is held weakly: a class lives until a garbage collection, and must
    not keep the model (and its process group) alive that long."""
    base = type(scheduler)
    held = weakref.ref(model)

    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        owner = held()
        if owner is not None and not owner.scheduler_may_step():
            return None
        return base.step(self, *args, **kwargs)

    scheduler.__class__ = type(base.__name__, (base,), {"step": step, "__module__": base.__module__})
    return base
