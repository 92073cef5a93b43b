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
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Sequence

import torch

from pollux.agent.steps import StepTracker

PRECONDITIONER_WARMUP_STEPS = 100


class GradientMeter:
    """Collects |local micro-gradient|² during backward and computes |averaged gradient|² at the step."""

    def __init__(
        self, params: Iterable[torch.nn.Parameter], optimizer: torch.optim.Optimizer, tracker: StepTracker
    ) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.tracker = tracker
        self.optimizer = optimizer
        self.preconditioned = "betas" in optimizer.defaults  # Adam, AdamW, NAdam, RAdam, ...: exp_avg_sq state
        self.collecting = False
        self._denoms: dict[int, torch.Tensor] | None = None
        self._local: list[torch.Tensor] = []
        self._prev: tuple[list[torch.Tensor], torch.Tensor, int] | None = None  # (gradient, its |.|², batch size)
        self._handles = [p.register_hook(functools.partial(self._on_grad, id(p))) for p in self.params]

    @property
    def ready(self) -> bool:
        """False for an Adam-type optimizer during its first `PRECONDITIONER_WARMUP_STEPS` steps."""
        return not self.preconditioned or self._denoms is not None

    def _on_grad(self, key: int, grad: torch.Tensor) -> None:
        self.tracker.last_grad_t = time.perf_counter()  # the last one of a backward pass marks its compute end
        if self.collecting:
            denom = None if self._denoms is None else self._denoms.get(key)
            local = grad if denom is None else grad / denom
            self._local.append(torch.linalg.vector_norm(local.detach()))

    def take_local_sqr(self) -> torch.Tensor | None:
        """Σ over this process's micro-gradients since the last call of |g_micro|² (a float64 tensor on the
        gradients' device, not read back: no host-device synchronisation); resets the sum. None if none."""
        if not self._local:
            return None
        norms = torch.stack(self._local).double()
        self._local = []
        return norms.pow(2).sum()

    def preconditioned_grads(self) -> list[torch.Tensor]:
        """The optimizer's gradients, divided by the Adam denominator where there is one (new tensors then)."""
        grads = [p.grad for p in self.params if p.grad is not None]
        if self._denoms is None:
            return grads
        denoms = [self._denoms.get(id(p)) for p in self.params if p.grad is not None]
        return [g if d is None else g / d for g, d in zip(grads, denoms, strict=True)]

    @staticmethod
    def sqr_norm(tensors: Sequence[torch.Tensor]) -> torch.Tensor | None:
        """|tensors|² over all of them, as a float64 tensor (not read back); None for no tensors."""
        if not tensors:
            return None
        return torch.stack(torch._foreach_norm(list(tensors))).double().pow(2).sum()

    def consecutive_pair(
        self, grads: list[torch.Tensor], grads_sqr: torch.Tensor, batch_size: int
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(|G_small|² summed over the two small gradients, |G_big|²) from this step's and the previous step's
        gradient (big = their mean), for every second step: pairs do not overlap, so they are independent and the
        copy is needed half the time. None on the first step of a pair, keeping a copy of `grads` for the second."""
        prev = self._prev
        if prev is None or prev[2] != batch_size or len(prev[0]) != len(grads):
            self._prev = ([g.detach().clone() for g in grads], grads_sqr, batch_size)
            return None
        self._prev = None
        prev_grads, prev_sqr, _ = prev
        mean = torch._foreach_add(prev_grads, grads)
        torch._foreach_mul_(mean, 0.5)
        big = self.sqr_norm(mean)
        assert big is not None  # grads is not empty: its norm came in as grads_sqr
        return prev_sqr + grads_sqr, big

    def forget_previous(self) -> None:
        self._local = []
        self._prev = None

    def refresh_preconditioner(self) -> None:
        """After an optimizer step: 1/(sqrt(v̂)+ε) from Adam's bias-corrected second moment, per parameter, in three
        fused operations per parameter group (not three per parameter)."""
        if not self.preconditioned:
            return
        denoms: dict[int, torch.Tensor] = {}
        for group in self.optimizer.param_groups:
            beta2, eps = group["betas"][1], group["eps"]
            params, moments, corrections = [], [], []
            for p in group["params"]:
                state = self.optimizer.state.get(p)
                if not state or "exp_avg_sq" not in state:
                    continue
                step = float(state["step"])  # a CPU tensor unless the optimizer is capturable
                if step < PRECONDITIONER_WARMUP_STEPS:
                    self._denoms = None
                    return
                params.append(p)
                moments.append(state["exp_avg_sq"])
                corrections.append(1.0 - beta2**step)
            if not params:
                continue
            group_denoms = torch._foreach_div(moments, corrections)
            torch._foreach_sqrt_(group_denoms)
            torch._foreach_add_(group_denoms, eps)
            denoms.update((id(p), d) for p, d in zip(params, group_denoms, strict=True))
        self._denoms = denoms or None

    def remove(self) -> None:
        """Take the hooks off the parameters (the model is plain DDP again)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
