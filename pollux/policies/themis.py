"""Themis (Mahajan et al., NSDI'20): finish-time fairness, auctions among the jobs furthest behind, and leases; with
the workload's rigid jobs ("TunedJobs") as the Sia paper (SOSP'23, Table 4) compared against it (docs/design.md,
"Themis").

A job's finish-time fairness ρ = its JCT on the shared cluster ÷ its JCT alone on 1/N of the cluster (N: the active
jobs); ρ ≤ 1 means sharing paid off. Estimated each round, as the Sia artifact's Themis (Gavel's
`finish_time_fairness_perf`) estimates it, for a job j that would run on GPU type t from now on:

    T_shared(j, t) = age + restore (if it moves) + steps left / rate[j, t]
    T_alone(j)     = restore + (steps done + steps left) / rate_alone[j]
    rate_alone[j]  = Σ_t rate[j, t] · x[j, t],   x[j, t] = (GPUs of t ÷ N) ÷ GPUs of j, each row scaled to Σ_t x ≤ 1

with rate[j, t] its optimizer steps per second on its requested GPUs of type t (`pollux.policies.tuned_jobs`, the
same as Gavel's): a job alone on 1/N of the cluster time-shares each type in proportion to its size.

Every round, three steps:

1. **Leases.** A job keeps its GPUs for `lease_s` from when its allocation began (`JobView.allocated_at_s`).
2. **Auction.** Every job without a running lease wants GPUs; its ρ if left out is ρ_out = the ρ it reaches if it
   waits one more lease, then runs on its fastest type. All N jobs are ranked by ρ (a leased job by its ρ where it
   runs, a wanting one by ρ_out), and the ⌊(1 − f) · N⌋ furthest behind (at least one) are offered the GPUs no
   lease holds: the best-off fraction f is left out (`fairness_knob`). Each wanting job offered bids, per type, the
   ρ it would reach there; the auction picks at most one type per bidder, within each type's free GPUs, maximizing
   the product of ρ improvements Π ρ_out ÷ ρ_t (a mixed-integer program, HiGHS).
3. **Leftovers.** What the auction left goes to the other wanting jobs, furthest behind first (ρ_out), each on the
   type with room where its ρ is least; a job that fits nowhere left waits.

Placement as Gavel's: a job staying on its type keeps its exact GPUs; the others, largest first, best-fit onto one
node, else across the nodes with most free GPUs. Pure: the round is a function of the views; jobs are handled in
name order, so the result does not depend on the order of the views.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, milp

from pollux.cluster import Cluster
from pollux.defaults import RESTART_DELAY_S, THEMIS_FAIRNESS_KNOB
from pollux.errors import SpecError
from pollux.policies.base import JobView, PolicyResult
from pollux.policies.tuned_jobs import (
    TunedJobsPolicy,
    TypedStepTime,
    TypeFit,
    chosen_batches,
    current_type,
    fits_no_type,
    place_rigid,
    requested,
    step_rates,
    steps_done_and_left,
    type_fits,
)

# The Themis authors' implementation's default lease: five minutes, five of the engine's 60 s rounds.
DEFAULT_LEASE_S = 300.0


@dataclass(frozen=True)
class FinishTimes:
    """One round's ρ estimates (module docstring): `by_type[j, t]` if job j runs on type t from now on (∞ where it
    cannot), `left_out[j]` if it waits one more lease, `now[j]` what ranks it (where it runs under a lease, else
    `left_out`)."""

    by_type: np.ndarray
    left_out: np.ndarray
    now: np.ndarray


def isolated_rates(rates: np.ndarray, gpus: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Steps per second of each job alone on 1/N of the cluster: a time share (GPUs of the type ÷ N ÷ its GPUs) of
    each type it runs on, scaled so that the shares add up to at most all of its time (the Sia artifact's
    `IsolatedPolicy`)."""
    share = np.where(rates > 0, capacity[None, :] / rates.shape[0] / gpus[:, None], 0.0)
    share /= np.maximum(share.sum(axis=1, keepdims=True), 1.0)
    return np.asarray((rates * share).sum(axis=1))


def finish_times(
    jobs: Sequence[JobView],
    rates: np.ndarray,
    cluster: Cluster,
    now: float,
    lease_s: float,
    restore_s: float,
    leased: Mapping[str, str],
) -> FinishTimes:
    """ρ of every job under each choice of this round (module docstring); steps done and left as
    `steps_done_and_left` counts them."""
    types = cluster.gpu_types
    gpus = np.array([requested(job) for job in jobs], dtype=np.float64)
    alone = isolated_rates(rates, gpus, np.array([cluster.gpus_of_type(t) for t in types], dtype=np.float64))
    by_type = np.full(rates.shape, math.inf)
    left_out = np.full(len(jobs), math.inf)
    ranked = np.full(len(jobs), math.inf)
    for j, job in enumerate(jobs):
        done, left = steps_done_and_left(job, rates[j], types)
        restore = job.restart_delay_s if job.restart_delay_s is not None else restore_s
        if alone[j] <= 0:
            continue  # unknown speed everywhere: it cannot be estimated (it runs on leftovers, to be measured)
        t_alone = max(restore + (done + left) / alone[j], 1.0)
        on = current_type(job, cluster)
        for k, t in enumerate(types):
            if rates[j, k] > 0:
                by_type[j, k] = (job.age_s(now) + (0.0 if t == on else restore) + left / rates[j, k]) / t_alone
        left_out[j] = (job.age_s(now) + lease_s + restore + left / rates[j].max()) / t_alone
        ranked[j] = by_type[j, types.index(leased[job.name])] if job.name in leased else left_out[j]
    return FinishTimes(by_type, left_out, ranked)


def offered(ranked: np.ndarray, names: Sequence[str], fairness_knob: float) -> set[int]:
    """The jobs the auction is offered to: the ⌊(1 − f) · N⌋ with the largest ρ (at least one; ties: name)."""
    count = max(math.floor((1.0 - fairness_knob) * len(names) + 1e-9), 1)
    order = sorted(range(len(names)), key=lambda j: (-ranked[j], names[j]))
    return set(order[:count])


def auction(gain: np.ndarray, gpus: np.ndarray, free: np.ndarray) -> dict[int, int]:
    """Bidder (row) → type (column) maximizing Σ gain over the pairs chosen: at most one type per bidder, at most
    each type's free GPUs; only pairs of positive gain. A 0-1 program (HiGHS)."""
    rows, cols = np.nonzero((gain > 0) & (gpus[:, None] <= free[None, :]))
    if rows.size == 0:
        return {}
    pairs = np.arange(rows.size)
    num_rows, num_types = gain.shape
    matrix = sparse.csr_array(
        (
            np.concatenate([np.ones(rows.size), gpus[rows].astype(np.float64)]),
            (np.concatenate([rows, num_rows + cols]), np.concatenate([pairs, pairs])),
        ),
        shape=(num_rows + num_types, rows.size),
    )
    limits = np.concatenate([np.ones(num_rows), free.astype(np.float64)])
    solution = milp(
        -gain[rows, cols],
        constraints=LinearConstraint(matrix, -np.inf, limits),
        integrality=np.ones(rows.size),
        bounds=Bounds(0.0, 1.0),
    )
    if solution.x is None:  # choosing nothing is feasible: HiGHS fails only on a bug
        raise RuntimeError(f"Themis' auction failed: {solution.message}")
    won = solution.x > 0.5
    return dict(zip(rows[won].tolist(), cols[won].tolist(), strict=True))


class ThemisPolicy(TunedJobsPolicy):
    """Finish-time fair auctions of the GPUs no lease holds, among the jobs furthest behind; rigid jobs."""

    name: ClassVar[str] = "themis"
    settings: ClassVar[tuple[str, ...]] = ("restart_delay_s", "fairness_knob")

    def __init__(
        self,
        step_time: TypedStepTime | None = None,
        fairness_knob: float = THEMIS_FAIRNESS_KNOB,
        lease_s: float = DEFAULT_LEASE_S,
        restart_delay_s: float = float(RESTART_DELAY_S),
    ) -> None:
        """`fairness_knob` f in [0, 1]: 0 offers every auction to all jobs, 1 to the one furthest behind alone.
        `restart_delay_s`: what a (re)start costs a job whose view has no restore delay of its own."""
        if not 0.0 <= fairness_knob <= 1.0:
            raise SpecError(
                f"themis fairness_knob (Themis' f) must be a number in [0, 1], the share of best-off jobs left out "
                f"of each auction; got {fairness_knob}"
            )
        if not lease_s > 0:
            raise SpecError(f"themis lease_s must be a number of seconds > 0, got {lease_s}")
        super().__init__(step_time)
        self.fairness_knob = float(fairness_knob)
        self.lease_s = float(lease_s)
        self.restart_delay_s = float(restart_delay_s)

    def lease_left_s(self, job: JobView, now: float) -> float:
        """Seconds left of the lease on the GPUs the job holds: `lease_s` from when it got them; 0 once over (or
        when it holds none)."""
        if job.allocated_at_s is None or not any(job.allocation):
            return 0.0
        return max(job.allocated_at_s + self.lease_s - now, 0.0)

    def optimize(self, jobs: Sequence[JobView], cluster: Cluster, now: float) -> PolicyResult:
        if not jobs:
            return PolicyResult({})
        ordered = sorted(jobs, key=lambda job: job.name)
        names = [job.name for job in ordered]
        types = cluster.gpu_types
        fit = type_fits(ordered, cluster)
        rates = step_rates(ordered, fit, types, self._step_time)
        gpus = np.array([requested(job) for job in ordered])
        leased = {job.name: t for job in ordered if (t := self._leased_type(job, cluster, now)) is not None}
        rho = finish_times(ordered, rates, cluster, now, self.lease_s, self.restart_delay_s, leased)
        free = np.array([cluster.gpus_of_type(t) for t in types])
        for name, t in leased.items():
            free[types.index(t)] -= gpus[names.index(name)]
        fits = np.array([[f.fits for f in row] for row in fit], dtype=bool)
        wanting = [j for j, job in enumerate(ordered) if job.name not in leased and fits[j].any()]
        offer = offered(rho.now, names, self.fairness_knob)
        bidders = [j for j in wanting if j in offer]
        with np.errstate(divide="ignore", invalid="ignore"):
            gain = np.log(rho.left_out[bidders, None] / rho.by_type[bidders])
        gain = np.where(fits[bidders] & np.isfinite(gain), gain, 0.0)
        won = {bidders[b]: k for b, k in auction(gain, gpus[bidders], free).items()}
        chosen = dict(leased)
        for j, k in won.items():
            chosen[names[j]] = types[k]
            free[k] -= gpus[j]
        for j in sorted((j for j in wanting if j not in won), key=lambda j: (-rho.left_out[j], names[j])):
            room = [k for k in range(len(types)) if fits[j, k] and gpus[j] <= free[k]]
            if room:
                k = min(room, key=lambda k: (rho.by_type[j, k], k))
                chosen[names[j]] = types[k]
                free[k] -= gpus[j]
        return PolicyResult(
            allocations=place_rigid(ordered, chosen, cluster),
            reasons=self._reasons(ordered, fit, rho, set(bidders), chosen, leased, now),
            batch=chosen_batches(ordered, fit, types, chosen),
            info={
                "rho_if_left_out": dict(zip(names, rho.left_out.tolist(), strict=True)),
                "auction": sorted(names[j] for j in bidders),
            },
        )

    def _leased_type(self, job: JobView, cluster: Cluster, now: float) -> str | None:
        """The type of the GPUs the job holds at its request under a running lease, else None."""
        held = current_type(job, cluster)
        if held is None or sum(job.allocation) != requested(job) or not job.may_run_on(held):
            return None
        return held if self.lease_left_s(job, now) > 0 else None

    def _reasons(
        self,
        ordered: Sequence[JobView],
        fit: Sequence[Sequence[TypeFit]],
        rho: FinishTimes,
        bidders: set[int],
        chosen: Mapping[str, str],
        leased: Mapping[str, str],
        now: float,
    ) -> dict[str, str]:
        lease_ends = min((self.lease_left_s(job, now) for job in ordered if job.name in leased), default=None)
        next_lease = "" if lease_ends is None else f"; the next lease ends in {lease_ends:.0f} s"
        reasons = {}
        for j, job in enumerate(ordered):
            if job.name in chosen:
                continue
            if not any(f.fits for f in fit[j]):
                reasons[job.name] = fits_no_type(fit[j])
                continue
            behind = f"ρ {rho.left_out[j]:.2f} if left out another lease"
            if j in bidders:
                reasons[job.name] = f"waiting: {behind}; outbid in the auction of the GPUs no lease holds{next_lease}"
            else:
                reasons[job.name] = (
                    f"waiting: {behind}, among the best-off {self.fairness_knob:.0%} left out of the auction; "
                    f"no GPUs left over{next_lease}"
                )
        return reasons
