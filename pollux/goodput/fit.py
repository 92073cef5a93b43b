"""Fit `ThroughputParams` to measured step times (Pollux §3.2).

Objective: RMSE of log T_grad (against measured compute times) plus RMSE of log T_iter (against measured full step
times), minimized by L-BFGS-B with an analytic gradient. α and β are optimized in log space with a floor of 1e-8 s,
γ in [1, 10]. Two regularizers break ties the data cannot: γ is pulled towards 1 (no overlap), and each sync β
towards a small share of its α by 1e-2·(β/α)², the artifact's penalty: of the models that explain the samples, the
one most optimistic about more replicas (all-reduce cost grows slowly with the replica count). A weaker pull
leaves β where a few noisy points put it, and the scheduler then stops growing the job early.

Priors, for parameters the samples cannot identify (they matter: the scheduler extrapolates with them):
- one per-GPU batch size seen → α_c pinned at half the mean compute time, so constant and per-example cost share
  the time equally (optimistic about larger batches, which the job then measures). Measured times (the agent's)
  are noisy: there, sizes all within a factor of `min_bsz_spread` (a job that has crept 16 → 17) count as one, for
  between such close sizes the slope is lost in the noise; fitted free, β_c could land on the floor, and a job whose
  per-example cost looks free picks the largest batch it may. A profile's times (the simulator's) are exact;
- no sample with K ≥ 2 on one node → α_r, β_r pinned at the floor: sync inside a node is assumed free until
  measured (optimistic, so the scheduler tries a second GPU; the exploration bound of 2× the largest K run keeps
  the step small). Left free with no sample to hold them, the β/α penalty would push α_r up without bound;
- no sample with K > 2 → β_r, β_n pinned at the floor (only the constant part of sync is observable);
- no multi-node sample → α_n, β_n are not fitted but set to 1.1× their intra-node twins: crossing nodes is never
  assumed cheaper than staying inside one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from pollux.goodput.throughput import ThroughputParams, compute_time, iteration_time

FLOOR = 1e-8
GAMMA_BOUNDS = (1.0, 10.0)
LOG_CEILING = np.log(1e4)
GAMMA_REG = 1e-3
BETA_REG = 1e-2
INTER_NODE_FACTOR = 1.1
NOISY_BSZ_SPREAD = 1.5  # measured per-GPU batch sizes spanning less than this factor do not identify β_c

A_C, B_C, A_R, B_R, A_N, B_N, GAMMA = range(7)


@dataclass(frozen=True)
class ThroughputSamples:
    """Observed steps: per row the allocation (nodes, replicas), per-GPU batch, accumulation steps, the measured
    compute time of one micro-batch and the measured full optimizer-step time, in seconds."""

    num_nodes: np.ndarray
    num_replicas: np.ndarray
    local_bsz: np.ndarray
    accum_steps: np.ndarray
    compute_time: np.ndarray
    step_time: np.ndarray

    @classmethod
    def from_arrays(
        cls,
        num_nodes: ArrayLike,
        num_replicas: ArrayLike,
        local_bsz: ArrayLike,
        compute_time: ArrayLike,
        step_time: ArrayLike,
        accum_steps: ArrayLike = 0,
    ) -> ThroughputSamples:
        """Validate and broadcast raw columns into a sample set."""
        cols = np.broadcast_arrays(
            np.asarray(num_nodes, dtype=np.int64),
            np.asarray(num_replicas, dtype=np.int64),
            np.asarray(local_bsz, dtype=np.int64),
            np.asarray(accum_steps, dtype=np.int64),
            np.asarray(compute_time, dtype=np.float64),
            np.asarray(step_time, dtype=np.float64),
        )
        nodes, replicas, bsz, accum, t_grad, t_step = (np.atleast_1d(c).copy() for c in cols)
        if nodes.size == 0:
            raise ValueError("ThroughputSamples: need at least one sample")
        if np.any(nodes < 1) or np.any(replicas < nodes):
            raise ValueError("ThroughputSamples: need 1 <= num_nodes <= num_replicas in every sample")
        if np.any(bsz < 1) or np.any(accum < 0):
            raise ValueError("ThroughputSamples: need local_bsz >= 1 and accum_steps >= 0 in every sample")
        if not (np.all(t_grad > 0) and np.all(t_step > 0) and np.all(np.isfinite(t_grad + t_step))):
            raise ValueError("ThroughputSamples: compute_time and step_time must be finite and > 0")
        return cls(nodes, replicas, bsz, accum, t_grad, t_step)

    def __len__(self) -> int:
        return int(self.num_nodes.size)


def _initial_guess(s: ThroughputSamples, min_bsz_spread: float) -> np.ndarray:
    """A start inside the basin: a least-squares line for compute, mean observed sync excess for α_r, α_n."""
    x = np.full(7, 1e-3)
    if _slope_identifiable(s, min_bsz_spread):
        beta_c, alpha_c = np.polyfit(s.local_bsz.astype(np.float64), s.compute_time, 1)
    else:
        alpha_c = beta_c = 0.5 * float(np.mean(s.compute_time))
        beta_c /= float(np.mean(s.local_bsz))
    x[A_C] = max(alpha_c, 1e-4 * float(np.mean(s.compute_time)))
    x[B_C] = max(beta_c, FLOOR * 10)
    excess = s.step_time / (s.accum_steps + 1) - s.compute_time * 0.5
    for node_mask, idx in ((s.num_nodes == 1, A_R), (s.num_nodes > 1, A_N)):
        mask = node_mask & (s.num_replicas > 1)
        if np.any(mask):
            x[idx] = max(float(np.mean(excess[mask])), 1e-4)
            x[idx + 1] = 0.1 * x[idx]
    x[GAMMA] = 1.2
    return x


def _slope_identifiable(s: ThroughputSamples, min_bsz_spread: float) -> bool:
    """Whether the per-GPU batch sizes logged span enough to fit α_c and β_c apart (module docstring)."""
    low, high = int(s.local_bsz.min()), int(s.local_bsz.max())
    return high > low and high >= min_bsz_spread * low


def _pinned(s: ThroughputSamples, min_bsz_spread: float) -> dict[int, float]:
    """Parameters the samples cannot identify, with the prior value each is held at (module docstring)."""
    pins: dict[int, float] = {}
    if not _slope_identifiable(s, min_bsz_spread):
        pins[A_C] = 0.5 * float(np.mean(s.compute_time))
    if not np.any((s.num_replicas > 1) & (s.num_nodes == 1)):
        pins.update({A_R: FLOOR, B_R: FLOOR})
    if not np.any(s.num_replicas > 2):
        pins.update({B_R: FLOOR, B_N: FLOOR})
    if not np.any(s.num_nodes > 1):
        pins.update({A_N: FLOOR, B_N: FLOOR})  # replaced by 1.1× the intra-node twins after the fit
    return pins


class _Objective:
    """Loss and gradient with respect to theta = (log α_c, log β_c, …, log β_n, γ); per-sample constants are
    computed once per fit, since L-BFGS-B evaluates the loss tens of times."""

    def __init__(self, s: ThroughputSamples, free: np.ndarray) -> None:
        self.m = s.local_bsz.astype(np.float64)
        self.extra = np.maximum(s.num_replicas - 2, 0).astype(np.float64)
        self.intra = ((s.num_replicas > 1) & (s.num_nodes == 1)).astype(np.float64)
        self.inter = ((s.num_replicas > 1) & (s.num_nodes > 1)).astype(np.float64)
        self.accum = s.accum_steps.astype(np.float64)
        self.log_compute = np.log(s.compute_time)
        self.log_step = np.log(s.step_time)
        self.free = free
        self.n = float(s.local_bsz.size)

    def __call__(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        p = np.exp(theta[:6])
        gamma = theta[GAMMA]
        m, extra, intra, inter = self.m, self.extra, self.intra, self.inter
        g = p[A_C] + p[B_C] * m
        y = intra * (p[A_R] + p[B_R] * extra) + inter * (p[A_N] + p[B_N] * extra)
        hi = np.maximum(g, y)
        rg, ry = g / hi, y / hi
        rg_pow, ry_pow = rg**gamma, ry**gamma
        q = rg_pow + ry_pow
        o = hi * q ** (1.0 / gamma)
        t = self.accum * g + o
        log_g, log_t = np.log(g), np.log(t)

        e1 = log_g - self.log_compute
        e2 = log_t - self.log_step
        rmse1 = math.sqrt(float(e1 @ e1) / self.n)
        rmse2 = math.sqrt(float(e2 @ e2) / self.n)
        w1 = e1 / (self.n * max(rmse1, 1e-12) * g)
        w2 = e2 / (self.n * max(rmse2, 1e-12) * t)

        do_dg = (g / o) ** (gamma - 1.0)
        positive = y > 0
        do_dy = np.where(positive, (np.where(positive, y, 1.0) / o) ** (gamma - 1.0), 0.0)
        dt_dg = self.accum + do_dg
        log_y = np.log(np.where(positive, y, 1.0))
        dlogo_dgamma = -np.log(hi) / gamma - np.log(q) / gamma**2 + (rg_pow * log_g + ry_pow * log_y) / (gamma * q)

        w2_dt_dg = w2 * dt_dg
        w2_do_dy = w2 * do_dy
        grad = np.array(
            [
                float(w1.sum() + w2_dt_dg.sum()),
                float(w1 @ m + w2_dt_dg @ m),
                float(w2_do_dy @ intra),
                float(w2_do_dy @ (intra * extra)),
                float(w2_do_dy @ inter),
                float(w2_do_dy @ (inter * extra)),
                float(w2 @ (o * dlogo_dgamma)),
            ]
        )
        grad[:6] *= p  # d/d(log a) = a · d/da

        loss = rmse1 + rmse2 + GAMMA_REG * (gamma - 1.0) ** 2
        grad[GAMMA] += 2 * GAMMA_REG * (gamma - 1.0)
        for a, b in ((A_R, B_R), (A_N, B_N)):
            if self.free[a] and self.free[b]:
                penalty = BETA_REG * (p[b] / p[a]) ** 2  # d/d(log β) = 2·penalty, d/d(log α) = −2·penalty
                loss += penalty
                grad[a] -= 2 * penalty
                grad[b] += 2 * penalty
        return float(loss), grad * self.free


def fit_throughput(
    samples: ThroughputSamples, initial: ThroughputParams | None = None, min_bsz_spread: float = 1.0
) -> ThroughputParams:
    """Fit the throughput model to `samples` (see the module docstring for the objective and the priors).

    `initial`: a previous fit to start from (an agent refitting after one more sample converges in a few steps).
    `min_bsz_spread`: how far apart per-GPU batch sizes must be to identify the per-example cost (1: any two sizes,
    for exact times; `NOISY_BSZ_SPREAD` for measured ones).
    """
    pins = _pinned(samples, min_bsz_spread)
    x0 = _initial_guess(samples, min_bsz_spread)
    if initial is not None:
        # From the previous fit, except where it held a parameter at the floor (pinned then, or pushed there): in
        # log space that parameter's gradient is proportional to its value, so from the floor it would never move.
        previous = initial.to_array()
        x0 = np.where(previous > 2 * FLOOR, previous, x0)
    for idx, value in pins.items():
        x0[idx] = value
    theta0 = np.concatenate([np.log(np.maximum(x0[:6], FLOOR)), [x0[GAMMA]]])
    free = np.ones(7, dtype=bool)
    free[list(pins)] = False
    bounds = [(np.log(FLOOR), LOG_CEILING)] * 6 + [GAMMA_BOUNDS]
    bounds = [(theta0[i], theta0[i]) if not free[i] else b for i, b in enumerate(bounds)]
    theta0 = np.clip(theta0, [b[0] for b in bounds], [b[1] for b in bounds])
    # Imported here, not atop: goodput is evaluated (the agent, `pollux ls`) far more often than it is fitted.
    from scipy.optimize import minimize

    objective = _Objective(samples, free.astype(np.float64))
    result = minimize(objective, theta0, jac=True, method="L-BFGS-B", bounds=bounds)
    values = np.concatenate([np.exp(result.x[:6]), [result.x[GAMMA]]])
    if not np.any(samples.num_nodes > 1):
        values[A_N] = INTER_NODE_FACTOR * values[A_R]
        values[B_N] = INTER_NODE_FACTOR * values[B_R]
    return ThroughputParams.from_array(values)


def rmsle(params: ThroughputParams, samples: ThroughputSamples) -> tuple[float, float]:
    """(RMSLE of compute time, RMSLE of step time) of `params` on `samples`: the fit's own yardstick."""
    pred_grad = compute_time(params, samples.local_bsz)
    pred_step = iteration_time(params, samples.num_nodes, samples.num_replicas, samples.local_bsz, samples.accum_steps)
    e1 = np.log(pred_grad) - np.log(samples.compute_time)
    e2 = np.log(pred_step) - np.log(samples.step_time)
    return float(np.sqrt(np.mean(e1**2))), float(np.sqrt(np.mean(e2**2)))
