"""Sharing the replicas' local gradient statistics, stop and checkpoint requests, at a small cost per step.

The local-vs-global noise-scale estimate (pollux.agent.gns) needs every replica's Σ|local micro-gradient|² summed
over replicas, and a stop request (SIGTERM) or a periodic checkpoint that falls due must reach every replica at the
same step. All three ride on one small all-reduce. On
a busy host a collective costs a millisecond or more (every process must be scheduled), as much as the agent's
other per-step work together, so:

- steps are pooled into windows (the estimators are linear in the squared norms, so summing a window of steps of one
  batch configuration and updating once is the same estimate as updating per step). A window spans about
  `WINDOW_TARGET_S` of training, whatever a step takes: each exchange carries the replicas' measured time per step,
  and every replica derives the next window's length in steps from the same all-reduced value, so they stay in
  lockstep. A fixed count of steps would be too many exchanges where steps are short (on a busy 2-core host, one
  exchange costs ~1.4 ms of wall time: every 4 steps of 10 ms that was a quarter of the agent's cost) and too long a
  wait for a stop request where steps are long;
- a window's all-reduce is launched asynchronously and waited for one step later, so its round trip hides behind
  that step's forward and backward pass.

The squared norms stay tensors on the gradients' device until a window's values are read back, once per window,
one step after it closed. On a GPU a plain read-back (`.tolist()`) waits for every kernel queued before it, the next
step's forward and backward included, so the host would lose its lead on the device once per window; the copy is made
on a side stream instead, after only the window's own sums (and its all-reduce), into pinned memory. One process pools
its windows the same way, without the all-reduce, and reads nothing back for a window in which nothing was measured.

The price: a stop or checkpoint request takes effect one window and one step later (about `WINDOW_TARGET_S`, or
one step where a step is longer), and the estimate lags as much. Every replica opens and closes windows at the
same steps and waits in the same order, so collectives always match.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from pollux.agent.gns import NoiseScaleEstimator

WINDOW_TARGET_S = 0.2  # training time one exchange window spans (its steps follow the measured step time)
FIRST_WINDOW_STEPS = 4  # before any step time is known
MAX_WINDOW_STEPS = 64  # however short the steps: the estimate's and a stop's lag stay bounded in steps too


@dataclass
class _Window:
    """Steps of one batch configuration, summed: `sqr_sums` = [Σ|local micro-gradient|² of this replica, Σ|big-batch
    gradient|² (the same on every replica)] over the steps that were measured, `local_count` how many micro-gradients
    the first sum holds, and the big batch's size (the step's batch; twice that where one gradient per step is paired
    with the previous step's)."""

    batch_size: int
    init_batch_size: int
    num_examples: int
    micro_steps: int
    steps: int = 0
    measured_steps: int = 0
    sqr_sums: torch.Tensor | None = None
    local_count: float = 0.0
    big_batch_size: int = 0

    def same_configuration(self, batch_size: int, init_batch_size: int, num_examples: int, micro_steps: int) -> bool:
        mine = (self.batch_size, self.init_batch_size, self.num_examples, self.micro_steps)
        return mine == (batch_size, init_batch_size, num_examples, micro_steps)


@dataclass(frozen=True)
class _InFlight:
    # distributed: (Σ local |g_micro|², Σ |G_big|², micro-gradient count, stop flag, checkpoint flag, seconds per
    # step), all-reduced; one process: the window's two sums
    values: torch.Tensor
    work: Any  # None for one process: nothing to wait for
    ready: Any  # on a GPU: an event after the kernels that produced `values`
    window: _Window


class StatisticsExchange:
    """Windows of steps → one async all-reduce each → noise-scale updates, the agreed stop and checkpoint flags.
    `interval_steps`: a fixed window length in steps; None (the default) follows the step time, a window spanning
    about `WINDOW_TARGET_S`. `distributed=False` (one process): windows without the all-reduce, flags not carried."""

    def __init__(
        self,
        noise: NoiseScaleEstimator,
        interval_steps: int | None = None,
        *,
        distributed: bool = True,
        device: torch.device | None = None,
    ) -> None:
        if interval_steps is not None and interval_steps < 1:
            raise ValueError(f"interval_steps must be >= 1 (or None: follow the step time), got {interval_steps}")
        self.noise = noise
        self.adaptive = interval_steps is None
        self.interval_steps = FIRST_WINDOW_STEPS if interval_steps is None else interval_steps
        self._closed_at: float | None = None  # when the last window closed: the next one's steps ran since
        self.distributed = distributed
        self.device = device or torch.device("cpu")
        self.stop_agreed = False
        self._checkpoint_agreed = False
        self._window: _Window | None = None
        self._in_flight: _InFlight | None = None
        self._side_stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None

    def add_step(
        self,
        stop_requested: bool,
        checkpoint_due: bool,
        batch_size: int,
        init_batch_size: int,
        num_examples: int,
        micro_steps: int,
        measured: tuple[torch.Tensor, float, int] | None,
    ) -> None:
        """Record one optimizer step (every replica calls this at every step with the same configuration).
        `measured`: ([Σ local |g_micro|², |G_big|²] as a float64 tensor of two, how many micro-gradients the first
        sums, big batch size), or None where the step was not measured."""
        self._complete()  # the previous window's all-reduce, launched at least one step ago
        window = self._window
        if window is not None and not window.same_configuration(batch_size, init_batch_size, num_examples, micro_steps):
            self._close_window(stop_requested, checkpoint_due)
            window = None
        if window is None:
            window = self._window = _Window(batch_size, init_batch_size, num_examples, micro_steps)
        window.steps += 1
        if measured is not None:
            sqr_sums, local_count, big_batch_size = measured
            window.measured_steps += 1
            window.sqr_sums = sqr_sums if window.sqr_sums is None else window.sqr_sums + sqr_sums
            window.local_count += local_count
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
        now = time.perf_counter()
        step_s = 0.0 if self._closed_at is None else (now - self._closed_at) / window.steps  # 0: not known yet
        self._closed_at = now
        sums = window.sqr_sums
        if self.distributed:
            if sums is None:
                sums = torch.zeros(2, dtype=torch.float64, device=self.device)
            flags = torch.tensor(
                [window.local_count, float(stop_requested), float(checkpoint_due), step_s], dtype=torch.float64
            )
            values = torch.cat([sums, flags.to(self.device, non_blocking=True)])  # a host-to-device copy, no sync
            work = dist.all_reduce(values, async_op=True)
        else:
            self._follow_step_time(step_s)  # one process: nothing to agree on
            if sums is None:
                return  # nothing measured: nothing to learn from this window
            values, work = sums, None
        ready = None
        if self._side_stream is not None:
            ready = torch.cuda.Event()
            ready.record()
        self._in_flight = _InFlight(values, work, ready, window)

    def _follow_step_time(self, step_s: float) -> None:
        """Size the next windows to span about `WINDOW_TARGET_S` at `step_s` seconds per step (0: unknown, no
        change)."""
        if self.adaptive and step_s > 0:
            self.interval_steps = max(1, min(MAX_WINDOW_STEPS, round(WINDOW_TARGET_S / step_s)))

    def _read_back(self, in_flight: _InFlight) -> list[float]:
        """The window's values on the host, waiting for its all-reduce and the kernels that produced them only."""
        side = self._side_stream
        if side is None:
            if in_flight.work is not None:
                in_flight.work.wait()
            return in_flight.values.tolist()
        with torch.cuda.stream(side):
            side.wait_event(in_flight.ready)
            if in_flight.work is not None:
                in_flight.work.wait()  # the side stream waits for the all-reduce
            host = torch.empty(in_flight.values.shape, dtype=in_flight.values.dtype, pin_memory=True)
            host.copy_(in_flight.values, non_blocking=True)
        side.synchronize()
        return host.tolist()

    def _complete(self) -> None:
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is None:
            return
        window = in_flight.window
        if self.distributed:
            local_sqr, global_sqr, count, stop, checkpoint, step_s = self._read_back(in_flight)  # its one read-back
            world_size = dist.get_world_size()
            global_sqr /= world_size  # every replica added the same |G_big|²
            self._follow_step_time(step_s / world_size)  # the same value on every replica: the same next window
            if stop > 0:
                self.stop_agreed = True
            if checkpoint > 0:
                self._checkpoint_agreed = True
        else:
            local_sqr, global_sqr = self._read_back(in_flight)
            count = window.local_count
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
