"""Where the training loop is, and the clock marks that split an optimizer step into compute and sync (torch-free).

The loader opens and closes micro-batches; the model's forward, its gradient hooks and the optimizer's step read
and mark this one object, which is how they agree on accumulation and timing without global state.

Timing (what the throughput fit needs, Pollux §3.2): a micro-batch runs from the moment the loader is asked for
it (data loading included, it scales with the batch too) until the loader is asked for the next one. Micro-steps
that do not synchronise are pure compute. In the final, synchronising micro-step of a multi-replica job, compute
ends when the backward pass produces its last local gradient (the last parameter hook fires; DDP's last bucket is
ready then); the rest is all-reduce time the backward pass did not hide, plus the optimizer update. The step time
is the whole span from the first micro-batch to the next step.
"""

from __future__ import annotations

from typing import NamedTuple

from pollux.agent.sampler import MicroBatch


class StepTiming(NamedTuple):  # one per step: a tuple is made faster than a frozen dataclass
    compute_s: float  # mean forward + backward time of one micro-batch
    step_s: float  # the whole optimizer step
    micro_steps: int
    full: bool  # every micro-batch had the configured size (the step is a fair throughput sample)


class StepTracker:
    """State of the current optimizer step, shared by loader, model and optimizer of one agent."""

    def __init__(self) -> None:
        self.micro: MicroBatch | None = None  # None outside an AdaptiveDataLoader loop
        self.init_batch_size = 0  # M0 of the loader being iterated
        self.num_examples = 0  # its dataset's size: an epoch draws its batches without replacement from these
        self.multi_gradient = False  # a step yields more than one gradient (K > 1 or accumulation)
        self.step_start_position = 0
        self.forward_seen = False  # a forward pass has fed the current, unfinished step
        self.stepped = False  # the optimizer stepped at the end of the current step
        self.optimizer_steps = 0  # real optimizer steps taken in this process
        self.last_grad_t: float | None = None  # when the latest local gradient was produced
        self._micro_t0 = 0.0
        self._step_t0 = 0.0
        self._compute_s = 0.0
        self._micros = 0
        self._full = True

    def begin_micro(self, micro: MicroBatch, now: float) -> None:
        if micro.micro_index == 0:
            self._step_t0, self._compute_s, self._micros, self._full = now, 0.0, 0, True
            self.step_start_position = micro.start
            self.forward_seen = self.stepped = False
        self.micro = micro
        self._micro_t0 = now
        self.last_grad_t = None

    def end_micro(self, now: float, distributed: bool) -> StepTiming | None:
        """Close the current micro-batch; the step's timing when it was the step's last one, else None."""
        micro = self.micro
        if micro is None:
            return None
        ready = self.last_grad_t
        last_compute_end = ready if distributed and micro.ends_step and ready is not None else now
        self._compute_s += last_compute_end - self._micro_t0
        self._micros += 1
        self._full = self._full and micro.full
        if not micro.ends_step:
            return None
        return StepTiming(self._compute_s / self._micros, now - self._step_t0, self._micros, self._full)

    @property
    def step_examples(self) -> int:
        """Examples (over all replicas) in the current step so far: the batch size M of the step."""
        return 0 if self.micro is None else self.micro.stop - self.step_start_position

    @property
    def step_full(self) -> bool:
        return self._full and (self.micro is None or self.micro.full)

    def leave(self) -> None:
        self.micro = None
