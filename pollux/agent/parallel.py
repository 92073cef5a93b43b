"""`AdaptiveDataParallel`: DistributedDataParallel that measures, scales its LR and survives restarts (Pollux §3).

Wrapping the model also wraps the optimizer (and LR scheduler) so the user's loop stays ordinary PyTorch:

- `optimizer.step()` after a non-final accumulation micro-batch does nothing; after the final one it averages the
  accumulated gradient, updates the noise-scale estimate (pollux.agent.gradients, pollux.agent.gns), multiplies the
  LR by the scaling rule's factor for this one step, and counts progress in M0-steps with the AdaScale gain.
- `optimizer.zero_grad()` and `lr_scheduler.step()` do nothing in the middle of an accumulating step.
- forward() switches DDP's gradient synchronisation off for non-final micro-batches (what `no_sync()` does).
- An all-reduce comm hook marks when the last gradient bucket is ready, splitting compute from sync time.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from pollux.agent.context import AgentContext, current_agent
from pollux.agent.gns import NoiseScaleEstimator
from pollux.agent.gradients import GradientMeter
from pollux.agent.scaling import AdaScale, ScalingRule
from pollux.goodput import GradientStats, adascale_gain, noise_scale


class AdaptiveDataParallel(DistributedDataParallel):
    """DDP for a job whose batch size, LR and replica count change while it trains.

    `scaling_rule` defaults to `AdaScale()`. `gns_smoothing` is the EMA factor per M0-batch of examples for the
    gradient statistics. Other keyword arguments go to `DistributedDataParallel`. Construct it after
    `init_process_group`: on a restart it loads the checkpointed model, optimizer and scheduler state.
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
        self._meter = GradientMeter(module.parameters(), optimizer)
        self.register_comm_hook(None, self._timed_allreduce)

        self._inner_step = optimizer.step
        self._inner_zero_grad = optimizer.zero_grad
        optimizer.step = self._step  # type: ignore[method-assign]
        optimizer.zero_grad = self._zero_grad  # type: ignore[method-assign]
        self._scheduler_seen_steps = 0
        if lr_scheduler is not None:
            self._inner_scheduler_step = lr_scheduler.step
            lr_scheduler.step = self._scheduler_step

        if restored is not None:
            optimizer.load_state_dict(restored["optimizer"])
            if lr_scheduler is not None and restored.get("lr_scheduler") is not None:
                lr_scheduler.load_state_dict(restored["lr_scheduler"])
            self.noise.load_state_dict(restored["noise"])
            self._meter.refresh_preconditioner()
        agent.attach_model(self)

    # -- what the user sees -----------------------------------------------------------------------------------

    @property
    def agent(self) -> AgentContext:
        if self._agent is None:
            raise RuntimeError("this AdaptiveDataParallel's agent was closed")
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
        self._agent = None

    # -- the wrapped calls ------------------------------------------------------------------------------------

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        agent = self._agent
        micro = None if agent is None else agent.tracker.micro
        if micro is not None and torch.is_grad_enabled():
            tracker = agent.tracker
            self.require_backward_grad_sync = micro.ends_step
            tracker.forward_seen = True
            self._meter.collecting = tracker.multi_gradient and self._meter.ready
        else:
            self.require_backward_grad_sync = True
            self._meter.collecting = False
        return super().forward(*inputs, **kwargs)

    def _timed_allreduce(self, state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        """DDP's default all-reduce (average over replicas), plus the time the bucket became ready."""
        if self._agent is not None:
            self._agent.tracker.sync_ready_t = time.perf_counter()
        buffer = bucket.buffer()
        world = dist.get_world_size()
        if world == 1:
            done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
            done.set_result(buffer)
            return done
        buffer.div_(world)
        return dist.all_reduce(buffer, async_op=True).get_future().then(lambda fut: fut.value()[0])

    def _zero_grad(self, *args: Any, **kwargs: Any) -> None:
        tracker = None if self._agent is None else self._agent.tracker
        if tracker is not None and tracker.micro is not None and tracker.forward_seen and not tracker.stepped:
            return  # mid-accumulation: these gradients are still being summed
        self._inner_zero_grad(*args, **kwargs)

    def _scheduler_step(self, *args: Any, **kwargs: Any) -> Any:
        tracker = None if self._agent is None else self._agent.tracker
        if tracker is not None and tracker.micro is not None:
            if tracker.optimizer_steps == self._scheduler_seen_steps:
                return None  # the optimizer has not stepped since the scheduler last did (accumulating)
            self._scheduler_seen_steps = tracker.optimizer_steps
        return self._inner_scheduler_step(*args, **kwargs)

    def _step(self, *args: Any, **kwargs: Any) -> Any:
        agent = self._agent
        tracker = None if agent is None else agent.tracker
        if agent is None or tracker is None or tracker.micro is None:
            return self._inner_step(*args, **kwargs)  # outside an AdaptiveDataLoader loop: a plain step
        micro = tracker.micro
        if not micro.ends_step or tracker.stepped:
            return None
        micro_steps = micro.micro_index + 1
        grads = [p.grad for p in self._meter.params if p.grad is not None]
        if micro_steps > 1:
            torch._foreach_div_(grads, micro_steps)  # accumulated sum -> mean over the step's micro-batches
        batch_size = tracker.step_examples
        init_batch_size = tracker.init_batch_size
        self._measure(agent, micro_steps, batch_size, init_batch_size, tracker.step_full)

        stats = self.noise.grad_stats(init_batch_size)
        factor = float(self.scaling_rule.lr_factor(batch_size, init_batch_size, stats))
        if not (math.isfinite(factor) and factor > 0):
            raise ValueError(f"{self.scaling_rule!r}.lr_factor returned {factor}; it must be finite and > 0")
        groups = self.optimizer.param_groups
        base_lrs = [group["lr"] for group in groups]
        for group, lr in zip(groups, base_lrs, strict=True):
            group["lr"] = lr * factor
        try:
            result = self._inner_step(*args, **kwargs)
        finally:
            for group, lr in zip(groups, base_lrs, strict=True):
                group["lr"] = lr
        self.last_lr_factor = factor
        gain = 1.0 if stats is None else float(adascale_gain(stats, init_batch_size, batch_size))
        agent.m0_steps += gain
        agent.steps += 1
        agent.examples += batch_size
        self._meter.refresh_preconditioner()
        tracker.stepped = True
        tracker.optimizer_steps += 1
        return result

    def _measure(
        self, agent: AgentContext, micro_steps: int, batch_size: int, init_batch_size: int, full: bool
    ) -> None:
        """Update the noise-scale estimate from this step's gradients (all replicas agree on the numbers), and
        agree on a stop request in the same collective."""
        meter = self._meter
        measure = full and meter.ready
        local_sqr = meter.take_local_sqr()
        pre = meter.preconditioned_grads() if measure else []
        global_sqr = meter.sqr_norm(pre) if measure else 0.0
        values = [local_sqr, float(micro_steps), global_sqr, float(agent.stop_requested_locally), float(measure)]
        if agent.distributed:
            reduced = torch.tensor(values, dtype=torch.float64)
            dist.all_reduce(reduced)
            values = reduced.tolist()
        local_total, count, global_total, stop, measured = values
        if stop > 0:
            agent.stop_agreed = True
        if measured < agent.world_size:
            meter.forget_previous()
            return
        global_sqr = global_total / agent.world_size
        if count >= 2:
            small_bsz = batch_size / count
            self.noise.update(local_total / count, small_bsz, global_sqr, batch_size, init_batch_size)
            return
        small, big = meter.consecutive_pair(pre, global_sqr, batch_size)
        if math.isfinite(small):
            self.noise.update(small, batch_size, big, 2 * batch_size, init_batch_size)
