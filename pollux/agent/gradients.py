"""Squared gradient norms at two batch sizes, the raw input of the noise-scale estimate (McCandlish et al. 2018).

- Small batch: every micro-batch gradient of every replica before it is averaged (a tensor hook on each parameter
  sees the local gradient of one backward pass before DDP all-reduces it or accumulation adds it up).
- Big batch: the averaged gradient the optimizer steps with (after DDP's all-reduce and the accumulation mean).
- One replica without accumulation has a single gradient per step: the previous step's gradient is the other
  small batch, their mean the big one (consecutive micro-batches; slightly biased while the weights move).

Adam-type optimizers step along g/(sqrt(v̂)+ε), so their noise scale is measured in that preconditioned space
(Pollux §3.1): every gradient is divided by the optimizer's current denominator before its norm is taken. Only once
the second-moment estimate has averaged `PRECONDITIONER_WARMUP_STEPS` steps, though: before that 1/sqrt(v̂) of a
coordinate rests on a few squared gradients, is heavy-tailed, and one such step would dominate the moving averages.

Cost: a measured step's norms are a handful of fused tensor operations whatever the number of parameters (one
multi-tensor norm, one weighted sum of the squares), kept on the gradients' device: nothing is read back here. The
preconditioner is recomputed only for a step that is measured, from the optimizer's state as it is then.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from pollux.agent.steps import StepTracker

PRECONDITIONER_WARMUP_STEPS = 100


class GradientMeter:
    """Collects |local micro-gradient| during backward and computes the squared norms of a measured step."""

    def __init__(
        self, params: Iterable[torch.nn.Parameter], optimizer: torch.optim.Optimizer, tracker: StepTracker
    ) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.tracker = tracker
        self.optimizer = optimizer
        self.preconditioned = "betas" in optimizer.defaults  # Adam, AdamW, NAdam, RAdam, ...: exp_avg_sq state
        self.collecting = False
        self._denoms: dict[int, torch.Tensor] | None = None
        self._denoms_stale = True  # the optimizer stepped since they were computed
        self._local: list[torch.Tensor] = []
        self._prev: list[torch.Tensor] = []  # a copy of the first gradient of a consecutive pair (reused buffers)
        self._prev_batch_size: int | None = None  # its batch size; None: no first gradient held
        self._weights: dict[tuple[int, float, int, float], torch.Tensor] = {}
        self._handles = [p.register_hook(functools.partial(self._on_grad, id(p))) for p in self.params]

    @property
    def ready(self) -> bool:
        """False for an Adam-type optimizer during its first `PRECONDITIONER_WARMUP_STEPS` steps. Ask it only for a
        step that is measured: it brings the preconditioner up to date."""
        if not self.preconditioned:
            return True
        if self._denoms_stale:
            self._refresh_preconditioner()
        return self._denoms is not None

    def optimizer_stepped(self) -> None:
        """The optimizer's state changed (a step, a restore): the preconditioner is recomputed when next needed."""
        self._denoms_stale = True

    def _on_grad(self, key: int, grad: torch.Tensor) -> None:
        self.tracker.last_grad_t = time.perf_counter()  # the last one of a backward pass marks its compute end
        if self.collecting:
            denom = None if self._denoms is None else self._denoms.get(key)
            local = grad if denom is None else grad / denom
            self._local.append(torch.linalg.vector_norm(local.detach()))

    def take_local_norms(self) -> list[torch.Tensor]:
        """|g_micro| of every micro-gradient of this process since the last call (device tensors); resets them."""
        local, self._local = self._local, []
        return local

    def preconditioned_grads(self) -> list[torch.Tensor]:
        """The optimizer's gradients, divided by the Adam denominator where there is one (new tensors then)."""
        grads = [p.grad for p in self.params if p.grad is not None]
        if self._denoms is None:
            return grads
        denoms = [self._denoms.get(id(p)) for p in self.params if p.grad is not None]
        if all(d is not None for d in denoms):
            return list(torch._foreach_div(grads, denoms))  # type: ignore[arg-type]
        return [g if d is None else g / d for g, d in zip(grads, denoms, strict=True)]

    def step_sqr_norms(self, local_norms: Sequence[torch.Tensor], grads: Sequence[torch.Tensor]) -> torch.Tensor:
        """[Σ |g_micro|² over `local_norms`, |G|² over `grads`] as one float64 tensor of two (not read back)."""
        norms = [*local_norms, *torch._foreach_norm(list(grads))]
        return self._weighted_squares(norms, (len(local_norms), 1.0, len(grads), 1.0))

    def consecutive_pair(self, grads: list[torch.Tensor], batch_size: int) -> torch.Tensor | None:
        """[|G_small|² summed over the two small gradients, |G_big|²] (one float64 tensor of two) from this step's
        and the previous step's gradient (big = their mean), for every second step: pairs do not overlap, so they are
        independent and the copy is needed half the time. None on the first step of a pair, keeping a copy of
        `grads` for the second."""
        prev = self._prev
        fresh = [b.shape for b in prev] != [g.shape for g in grads]
        if fresh:
            self._prev = prev = [torch.empty_like(g) for g in grads]
        if fresh or self._prev_batch_size != batch_size:
            torch._foreach_copy_(prev, grads)
            self._prev_batch_size = batch_size
            return None
        self._prev_batch_size = None
        sums = torch._foreach_add(prev, grads)
        norms = torch._foreach_norm([*prev, *grads, *sums])
        # |mean|² = |sum|²/4, exactly (a power of two); the norms of both small gradients come from one call
        return self._weighted_squares(norms, (2 * len(grads), 1.0, len(grads), 0.25))

    def _weighted_squares(self, norms: Sequence[torch.Tensor], layout: tuple[int, float, int, float]) -> torch.Tensor:
        """[w0 · Σ n² over the first `layout[0]` norms, w1 · Σ n² over the next `layout[2]`] in float64, for
        layout = (count0, w0, count1, w1): one matrix-vector product (the weights are made once per layout)."""
        squares = torch.stack(list(norms)).double().square()
        weights = self._weights.get(layout)
        if weights is None or weights.device != squares.device:
            first, w0, second, w1 = layout
            rows = [[w0] * first + [0.0] * second, [0.0] * first + [w1] * second]
            weights = self._weights[layout] = torch.tensor(rows, dtype=torch.float64, device=squares.device)
        return torch.mv(weights, squares)

    def forget_previous(self) -> None:
        self._local = []
        self._prev_batch_size = None

    def _refresh_preconditioner(self) -> None:
        """1/(sqrt(v̂)+ε) from Adam's bias-corrected second moment, per parameter, in three fused operations per
        parameter group (not three per parameter); the step counts read back in one go."""
        self._denoms_stale = False
        self._denoms = None
        denoms: dict[int, torch.Tensor] = {}
        for group in self.optimizer.param_groups:
            beta2, eps = group["betas"][1], group["eps"]
            params, moments, steps = [], [], []
            for p in group["params"]:
                state = self.optimizer.state.get(p)
                if not state or "exp_avg_sq" not in state:
                    continue
                params.append(p)
                moments.append(state["exp_avg_sq"])
                steps.append(state["step"])
            if not params:
                continue
            counts = _as_floats(steps)
            if min(counts) < PRECONDITIONER_WARMUP_STEPS:
                return
            group_denoms = torch._foreach_div(moments, [1.0 - beta2**step for step in counts])
            torch._foreach_sqrt_(group_denoms)
            torch._foreach_add_(group_denoms, eps)
            denoms.update((id(p), d) for p, d in zip(params, group_denoms, strict=True))
        self._denoms = denoms or None

    def remove(self) -> None:
        """Take the hooks off the parameters (the model is plain DDP again)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []


def _as_floats(values: Sequence[Any]) -> list[float]:
    """Numbers as floats, read back in one go where they are tensors on one device: a fused or capturable optimizer
    keeps its step counts on the GPU, and one synchronisation beats one per parameter."""
    if values and all(isinstance(v, torch.Tensor) for v in values) and len({(v.device, v.dtype) for v in values}) == 1:
        return [float(v) for v in torch.stack(list(values)).tolist()]
    return [float(v) for v in values]
