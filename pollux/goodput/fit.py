"""Fit `ThroughputParams` to measured step times (Pollux §3.2).

Objective: RMSE of log T_grad (against measured compute times) plus RMSE of log T_iter (against measured full step
times), minimized by L-BFGS-B with an analytic gradient. α and β are optimized in log space with a floor of 1e-8 s,
γ in [1, 10]. Two tiny regularizers break ties the data cannot: γ is pulled towards 1 (no overlap), and each sync
β towards a small share of its α (all-reduce cost grows slowly with the replica count).

Priors, for parameters the samples cannot identify (they matter: the scheduler extrapolates with them):
- one per-GPU batch size seen → α_c pinned at half the mean compute time, so constant and per-example cost share
  the time equally (optimistic about larger batches, which the job then measures);
- no sample with K ≥ 2 → α_r, β_r pinned at the floor: sync is assumed free until measured (optimistic, so the
  scheduler tries a second GPU; the exploration bound of 2× the largest K run keeps the step small);
- no sample with K > 2 → β_r, β_n pinned at the floor (only the constant part of sync is observable);
- no multi-node sample → α_n, β_n are not fitted but set to 1.1× their intra-node twins: crossing nodes is never
  assumed cheaper than staying inside one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import minimize

from pollux.goodput.throughput import ThroughputParams, compute_time, iteration_time

FLOOR = 1e-8
GAMMA_BOUNDS = (1.0, 10.0)
LOG_CEILING = np.log(1e4)
GAMMA_REG = 1e-3
BETA_REG = 1e-3
INTER_NODE_FACTOR = 1.1

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


def _initial_guess(s: ThroughputSamples) -> np.ndarray:
    """A start inside the basin: a least-squares line for compute, mean observed sync excess for α_r, α_n."""
    x = np.full(7, 1e-3)
    if np.unique(s.local_bsz).size > 1:
        beta_c, alpha_c = np.polyfit(s.local_bsz.astype(np.float64), s.compute_time, 1)
    else:
        alpha_c = beta_c = 0.5 * float(np.mean(s.compute_time))
        beta_c /= float(s.local_bsz[0])
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


def _pinned(s: ThroughputSamples) -> dict[int, float]:
    """Parameters the samples cannot identify, with the prior value each is held at (module docstring)."""
    pins: dict[int, float] = {}
    if np.unique(s.local_bsz).size == 1:
        pins[A_C] = 0.5 * float(np.mean(s.compute_time))
    if not np.any(s.num_replicas > 1):
        pins.update({A_R: FLOOR, B_R: FLOOR})
    if not np.any(s.num_replicas > 2):
        pins.update({B_R: FLOOR, B_N: FLOOR})
    if not np.any(s.num_nodes > 1):
        pins.update({A_N: FLOOR, B_N: FLOOR})  # replaced by 1.1× the intra-node twins after the fit
    return pins


def _objective(theta: np.ndarray, s: ThroughputSamples, free: np.ndarray) -> tuple[float, np.ndarray]:
    """Loss and its gradient with respect to theta = (log α_c, log β_c, …, log β_n, γ)."""
    p = np.exp(theta[:6])
    gamma = theta[GAMMA]
    m = s.local_bsz.astype(np.float64)
    extra = np.maximum(s.num_replicas - 2, 0).astype(np.float64)
    intra = (s.num_replicas > 1) & (s.num_nodes == 1)
    inter = (s.num_replicas > 1) & (s.num_nodes > 1)

    g = p[A_C] + p[B_C] * m
    y = np.where(intra, p[A_R] + p[B_R] * extra, np.where(inter, p[A_N] + p[B_N] * extra, 0.0))
    hi = np.maximum(g, y)
    rg, ry = g / hi, y / hi
    q = rg**gamma + ry**gamma
    o = hi * q ** (1.0 / gamma)
    t = s.accum_steps * g + o

    e1 = np.log(g) - np.log(s.compute_time)
    e2 = np.log(t) - np.log(s.step_time)
    n = e1.size
    rmse1 = np.sqrt(np.mean(e1**2))
    rmse2 = np.sqrt(np.mean(e2**2))
    w1 = e1 / (n * max(rmse1, 1e-12))
    w2 = e2 / (n * max(rmse2, 1e-12))

    do_dg = (g / o) ** (gamma - 1.0)
    do_dy = np.where(y > 0, (y / o) ** (gamma - 1.0), 0.0)
    dt_dg = s.accum_steps + do_dg
    log_y = np.log(np.where(y > 0, y, 1.0))
    dlogo_dgamma = (
        -np.log(hi) / gamma - np.log(q) / gamma**2 + (rg**gamma * np.log(g) + ry**gamma * log_y) / (gamma * q)
    )

    grad = np.zeros(7)
    # d/d(log a) = a · d/da
    grad[A_C] = p[A_C] * (np.sum(w1 / g) + np.sum(w2 * dt_dg / t))
    grad[B_C] = p[B_C] * (np.sum(w1 * m / g) + np.sum(w2 * dt_dg * m / t))
    grad[A_R] = p[A_R] * np.sum(w2 * do_dy * intra / t)
    grad[B_R] = p[B_R] * np.sum(w2 * do_dy * intra * extra / t)
    grad[A_N] = p[A_N] * np.sum(w2 * do_dy * inter / t)
    grad[B_N] = p[B_N] * np.sum(w2 * do_dy * inter * extra / t)
    grad[GAMMA] = np.sum(w2 * o * dlogo_dgamma / t)

    loss = rmse1 + rmse2 + GAMMA_REG * (gamma - 1.0) ** 2
    grad[GAMMA] += 2 * GAMMA_REG * (gamma - 1.0)
    for a, b in ((A_R, B_R), (A_N, B_N)):
        if free[a] and free[b]:
            share = p[b] / (p[a] + p[b])
            loss += BETA_REG * share**2
            dshare = 2 * BETA_REG * share / (p[a] + p[b]) ** 2
            grad[a] += -dshare * p[b] * p[a]
            grad[b] += dshare * p[a] * p[b]
    return float(loss), grad * free


def fit_throughput(samples: ThroughputSamples) -> ThroughputParams:
    """Fit the throughput model to `samples` (see the module docstring for the objective and the priors)."""
    pins = _pinned(samples)
    x0 = _initial_guess(samples)
    for idx, value in pins.items():
        x0[idx] = value
    theta0 = np.concatenate([np.log(np.maximum(x0[:6], FLOOR)), [x0[GAMMA]]])
    free = np.ones(7, dtype=bool)
    free[list(pins)] = False
    bounds = [(np.log(FLOOR), LOG_CEILING)] * 6 + [GAMMA_BOUNDS]
    bounds = [(theta0[i], theta0[i]) if not free[i] else b for i, b in enumerate(bounds)]
    result = minimize(
        _objective,
        theta0,
        args=(samples, free.astype(np.float64)),
        jac=True,
        method="L-BFGS-B",
        bounds=bounds,
    )
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
