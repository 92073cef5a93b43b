"""Sharing the replicas' local gradient statistics, stop and checkpoint requests, at a small cost per step.

The local-vs-global noise-scale estimate (pollux.agent.gns) needs every replica's Σ|local micro-gradient|² summed
over replicas, and a stop request (SIGTERM) or a periodic checkpoint that falls due must reach every replica at the
same step. All three ride on one small all-reduce. On
a busy host a collective costs a millisecond or more (every process must be scheduled), as much as the agent's
other per-step work together, so:

- steps are pooled into windows of `interval_steps` (the estimators are linear in the squared norms, so summing a
  window of steps of one batch configuration and updating once is the same estimate as updating per step);
- a window's all-reduce is launched asynchronously and waited for one step later, so its round trip hides behind
  that step's forward and backward pass.

The squared norms stay tensors on the gradients' device until a window's values are read back, once per window:
on a GPU, a read-back waits for every kernel queued before it, so one per step would keep the host from running
ahead of the device. One process pools its windows the same way, without the all-reduce.

The price: a stop or checkpoint request takes effect up to `interval_steps` + 1 steps later, and the estimate lags as
much. Every replica opens and closes windows at the same steps and waits in the same order, so collectives
always match.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from pollux.agent.gns import NoiseScaleEstimator


def _add(total: torch.Tensor | None, value: torch.Tensor | None) -> torch.Tensor | None:
    return value if total is None else total if value is None else total + value


@dataclass
class _Window:
    """Steps of one batch configuration, summed: Σ|local micro-gradient|² of this replica and how many, and
    Σ|big-batch gradient|² (the same on every replica) over the steps that were measured, and that big batch's size
    (the step's batch; twice that where one gradient per step is paired with the previous step's)."""

    batch_size: int
    init_batch_size: int
    num_examples: int
    micro_steps: int
    steps: int = 0
    measured_steps: int = 0
    local_sqr: torch.Tensor | None = None
    local_count: float = 0.0
    global_sqr: torch.Tensor | None = None
    big_batch_size: int = 0

    def same_configuration(self, batch_size: int, init_batch_size: int, num_examples: int, micro_steps: int) -> bool:
        mine = (self.batch_size, self.init_batch_size, self.num_examples, self.micro_steps)
        return mine == (batch_size, init_batch_size, num_examples, micro_steps)


@dataclass(frozen=True)
class _InFlight:
    # (Σ local |g_micro|², micro-gradient count, stop flag, checkpoint flag, Σ |G_big|² / replicas), all-reduced
    values: torch.Tensor
    work: Any  # None for one process: nothing to wait for
    window: _Window


class StatisticsExchange:
    """Windows of steps → one async all-reduce each → noise-scale updates, the agreed stop and checkpoint flags.
    `distributed=False` (one process): windows without the all-reduce, flags not carried."""

    def __init__(
        self,
        noise: NoiseScaleEstimator,
        interval_steps: int = 4,
        *,
        distributed: bool = True,
        device: torch.device | None = None,
    ) -> None:
        if interval_steps < 1:
            raise ValueError(f"interval_steps must be >= 1, got {interval_steps}")
        self.noise = noise
        self.interval_steps = interval_steps
        self.distributed = distributed
        self.device = device or torch.device("cpu")
        self.stop_agreed = False
        self._checkpoint_agreed = False
        self._window: _Window | None = None
        self._in_flight: _InFlight | None = None

    def add_step(
        self,
        stop_requested: bool,
        checkpoint_due: bool,
        batch_size: int,
        init_batch_size: int,
        num_examples: int,
        micro_steps: int,
        measured: tuple[torch.Tensor | None, float, torch.Tensor | None, int] | None,
    ) -> None:
        """Record one optimizer step (every replica calls this at every step with the same configuration).
        `measured`: (Σ local |g_micro|², how many micro-gradients, |G_big|², big batch size), or None where the step
        was not measured."""
        self._complete()  # the previous window's all-reduce, launched at least one step ago
        window = self._window
        if window is not None and not window.same_configuration(batch_size, init_batch_size, num_examples, micro_steps):
            self._close_window(stop_requested, checkpoint_due)
            window = None
        if window is None:
            window = self._window = _Window(batch_size, init_batch_size, num_examples, micro_steps)
        window.steps += 1
        if measured is not None:
            local_sqr, local_count, global_sqr, big_batch_size = measured
            window.measured_steps += 1
            window.local_sqr = _add(window.local_sqr, local_sqr)
            window.local_count += local_count
            window.global_sqr = _add(window.global_sqr, global_sqr)
            window.big_batch_size = big_batch_size
        if window.steps >= self.interval_steps:
            self._close_window(stop_requested, checkpoint_due)

    def flush(self, stop_requested: bool, checkpoint_due: bool) -> None:
        """Collective: close the open window and apply everything still in flight."""
        self._close_window(stop_requested, checkpoint_due)
        self._complete()

    def take_checkpoint_agreed(self) -> bool:
        """Whether some replica asked for a checkpoint in an exchange completed since the last call (every replica
        learns it at the same step); the request is consumed."""
        agreed, self._checkpoint_agreed = self._checkpoint_agreed, False
        return agreed

    def finish(self) -> None:
        """Wait for the exchange every replica already started, and drop it: a collective left pending when the
        process group is destroyed can abort the process at exit (gloo's worker threads still hold its tensors)."""
        self._complete()

    def _close_window(self, stop_requested: bool, checkpoint_due: bool) -> None:
        window, self._window = self._window, None
        if window is None:
            return
        self._complete()
        zero = torch.zeros((), dtype=torch.float64, device=self.device)
        replicas = dist.get_world_size() if self.distributed else 1
        global_share = (zero if window.global_sqr is None else window.global_sqr) / replicas
        scalars = torch.tensor(
            [window.local_count, float(stop_requested), float(checkpoint_due)], dtype=torch.float64, device=self.device
        )
        local = zero if window.local_sqr is None else window.local_sqr
        values = torch.cat([local.reshape(1), scalars, global_share.reshape(1)])
        work = dist.all_reduce(values, async_op=True) if self.distributed else None
        self._in_flight = _InFlight(values, work, window)

    def _complete(self) -> None:
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is None:
            return
        if in_flight.work is not None:
            in_flight.work.wait()
        local_sqr, count, stop, checkpoint, global_sqr = in_flight.values.tolist()  # the window's one read-back
        if stop > 0:
            self.stop_agreed = True
        if checkpoint > 0:
            self._checkpoint_agreed = True
        window = in_flight.window
        if window.measured_steps == 0 or count < 2:
            return
        # count = measured steps × replicas × micro-gradients: the small batch is the big one over that many
        small_bsz = window.big_batch_size * window.measured_steps / count
        self.noise.update(
            local_sqr / count,
            small_bsz,
            global_sqr / window.measured_steps,
            window.big_batch_size,
            window.init_batch_size,
            steps=window.steps,  # the window's weight: every step it trained, measured or not (a sample of them)
            num_examples=window.num_examples,
        )
