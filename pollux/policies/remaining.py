"""What a job's remaining work is worth to the Pollux policy (docs/design.md, "Remaining work").

A job's view carries the statistical progress it has left (`JobView.remaining_m0_steps`, from the epochs its loop
declares). Divided by its goodput on the fair share (M0-examples per second), it is the job's remaining time at its
fair share, t_j. Two uses, each a policy setting:

- **Shortest remaining first** (`srpt`, exponent a ≥ 0). Job j's term of the power mean is weighted by
  w_j = (t_j / t_ref)^(−a), t_ref the median t of the round's jobs that know theirs, clipped to [1/W, W]; a job
  that does not know its t weighs 1. With p = −1 the power mean minimizes Σ_j w_j / SPEEDUP_j = Σ_j w_j·τ_j / t_j
  (τ_j its remaining time at its allocation): a = 0 is the paper's sum of relative remaining times; a > 0 makes a
  second of a nearly done job's time cost more, as SRPT does for the mean JCT.
- **Restarts against what is left** (`finish_restarts`). Changing a job's allocation delays its finish by its
  restart delay δ: it finishes in δ + τ_j(A) instead of τ_j(A), so its speedup over what is left is multiplied by
  τ_j(A) / (τ_j(A) + δ) on every allocation but the one it holds (besides Pollux's factor by age). A job near its
  end is not moved for a gain its restart would eat.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pollux.policies.base import JobView

WEIGHT_CAP = 8.0  # W: no job weighs more than W times, or less than 1/W of, the median job


def remaining_time_s(job: JobView, base_goodput: float) -> float | None:
    """Seconds the job needs to finish on its fair share (whose goodput, M0-examples/s, is `base_goodput`); None
    where its remaining work is not known."""
    if job.remaining_m0_steps is None or base_goodput <= 0:
        return None
    return job.remaining_m0_steps * job.init_batch_size / base_goodput


def srpt_weights(remaining_s: Sequence[float | None], exponent: float, cap: float = WEIGHT_CAP) -> np.ndarray:
    """w_j = (t_j / median t)^(−exponent) within [1/cap, cap]; 1 where t_j is unknown (module docstring)."""
    weights = np.ones(len(remaining_s))
    known = np.array([t for t in remaining_s if t is not None], dtype=np.float64)
    if exponent == 0 or known.size == 0:
        return weights
    reference = max(float(np.median(known)), 1e-9)
    for j, t in enumerate(remaining_s):
        if t is not None:
            weights[j] = float(np.clip((max(t, 1e-9) / reference) ** -exponent, 1 / cap, cap))
    return weights


def finish_factor(speedups: np.ndarray, remaining_s: float | None, delay_s: float) -> np.ndarray | float:
    """τ / (τ + δ) for each entry of `speedups` (unscaled, over the fair share), τ = `remaining_s` / speedup: what
    a restart leaves of the job's speedup over what it has left; 1 where its remaining time is unknown."""
    if remaining_s is None or delay_s <= 0:
        return 1.0
    tau = remaining_s / np.maximum(speedups, 1e-12)
    return tau / (tau + delay_s)
