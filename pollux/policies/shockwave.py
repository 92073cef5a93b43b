"""Shockwave (Zheng et al., NSDI'23): every round, a plan of the next rounds that maximizes the Nash social welfare
of the jobs' progress while keeping each job's predicted finish time near its fair one; with the workload's rigid jobs
("TunedJobs") as the Sia paper (SOSP'23, Table 4, Figure 8) compared against it (docs/design.md, "Shockwave").

Terms, for a rigid job j (`pollux.policies.tuned_jobs`: its requested GPUs and fixed batch, steps per second
rate[j, t] on each GPU type t it fits):

    progress q_j    = steps done ÷ (steps done + steps left)
    step time τ_j   = the mean of 1 / rate[j, t] over the types it fits (the Sia artifact's average over types)
    share s         = min(1, the cluster's GPUs ÷ N), N the active jobs (the Sia artifact's uniform share)
    fair JCT F_j    = (age + steps left · τ_j) ÷ s, averaged over rounds with momentum (below), as the Sia artifact
                      estimates it
    planned JCT     = age + W + (steps left − planned steps) · τ_j ÷ s, W the window's seconds
    ρ̂_j            = (age + steps left · τ_j ÷ s) ÷ F_j: how far behind it is now

Every round (60 s, `round_s`), a mixed-integer program (HiGHS) plans the next `window_rounds` rounds: n[j, t] rounds
of the window on type t, at most the window's rounds per job, each type's GPU-rounds within its GPUs × the rounds.
A job's planned steps are its rate × the seconds planned, less a restore delay where it moves to a type it does not
run on now. The objective is the Nash social welfare Σ_j log q_j at the window's end, the logarithm approximated
piecewise-linearly between progress 0 (log 10⁻⁶), 0.2, 0.4, 0.6, 0.8 and 1 (concave, so exactly, without integers),
divided by N × rounds, less k × the longest time any job has left after the window; subject to planned JCT ≤
`rhomax` × F_j for every job that can meet it. A job that cannot, even running every round of the window, and every
job when the others' bounds cannot all be met together, is weighted instead: its log utility × ρ̂^λ while it is
behind (ρ̂ > `rhomax`; ρ̂^100 when it could finish within a round), as the Sia artifact relaxes its program.

Round 0 of the plan runs (`first_round`): the jobs planned for every round of the window, then those planned where
they run now (a pause would cost a restore), then the rest, furthest behind (ρ̂) first, as the artifact's second
program ranks them. Idle GPUs left go to the other jobs, most time left first (the artifact's work-conserving
fill), each where it runs now if there is room, else where it is fastest. Placement as Gavel's. The plan is
re-solved every round, as the Sia artifact does.

Momentum (the Sia artifact's): F_j = 0.9 × the time-weighted mean of the estimates of the rounds before + 0.1 × this
round's. The policy keeps that running mean per job (its only state; a restarted scheduler starts them afresh).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, milp

from pollux.cluster import Cluster
from pollux.defaults import RESTART_DELAY_S, ROUND_INTERVAL_S
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

# The Sia artifact's settings for Shockwave (its `ShockWavePolicy` as its simulator builds it).
DEFAULT_WINDOW_ROUNDS = 5  # future rounds planned (`--nfuture`)
DEFAULT_RHOMAX = 1.0  # the finish-time bound, × the fair finish time
PRIORITY_POWER = 12.0  # λ: a relaxed job behind its fair finish time weighs ρ̂^λ
FINISHING_POWER = 100.0  # ... and ρ̂^100 when it could finish within a round
MAKESPAN_WEIGHT = 1e-9  # k, per second of the longest time left after the window
LOG_BREAKPOINTS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # progress where log q is exact
LOG_ORIGIN = 1e-6  # log 0 taken as log of this
MOMENTUM = 0.9
# Ours: weights below a millionth of the largest count as a millionth (the solver still sees them), and HiGHS stops
# after this many branch-and-bound nodes, with the best plan found: a bound on work, not on time, so that a round's
# plan does not depend on the machine's load.
MIN_WEIGHT = 1e-6
NODE_LIMIT = 200
MIP_REL_GAP = 1e-4


@dataclass
class _MeanFinish:
    """A job's fair-finish estimates so far, as their time-weighted running sum."""

    first_s: float
    last_s: float
    last: float
    weighted_sum: float = 0.0

    def update(self, now: float, estimate: float) -> float:
        """F_j this round: momentum × the time-weighted mean of the earlier estimates + the rest × this one."""
        self.weighted_sum += self.last * max(now - self.last_s, 0.0)
        span = now - self.first_s
        mean = self.weighted_sum / span if span > 0 else estimate
        self.last_s, self.last = now, estimate
        return MOMENTUM * mean + (1.0 - MOMENTUM) * estimate


def log_segments() -> tuple[np.ndarray, np.ndarray]:
    """Slopes and intercepts of the piecewise-linear log between `LOG_BREAKPOINTS`: log q ≈ min_i(a_i + m_i · q)."""
    points = np.array(LOG_BREAKPOINTS)
    values = np.log(np.maximum(points, LOG_ORIGIN))
    slopes = np.diff(values) / np.diff(points)
    return slopes, values[:-1] - slopes * points[:-1]


@dataclass(frozen=True)
class Window:
    """One round's program input, for the jobs whose speed is known somewhere (rows) and the cluster's types
    (columns): `rates` steps per second (0: does not fit), `gpus`, `done`/`left` steps, `step_s` τ_j, `restore_s`,
    `running` the type each runs on now at its request (-1: none), `need` the planned steps its finish-time bound
    asks for (0: none; -1: it cannot meet it), `weight` of its log utility, `rank` ρ̂ (the first-rounds reward)."""

    rates: np.ndarray
    gpus: np.ndarray
    capacity: np.ndarray
    done: np.ndarray
    left: np.ndarray
    step_s: np.ndarray
    restore_s: np.ndarray
    running: np.ndarray
    need: np.ndarray
    weight: np.ndarray
    rank: np.ndarray


@dataclass(frozen=True)
class Plan:
    """The rounds of the window each job is planned on each type (rows × columns), and its steps; `solved` False
    where HiGHS found no plan."""

    rounds: np.ndarray
    steps: np.ndarray
    solved: bool


def plan_window(window: Window, rounds: int, round_s: float, bounded: bool) -> Plan:
    """The program of the module docstring, with the finish-time bounds (`need` > 0) where `bounded`; HiGHS with a
    node limit. Per job j and type t it fits: n[j, t] rounds of the window on t (integer) and y[j, t] = 1 if it runs
    on t at all, which costs a restore unless it runs there now. Each type's GPU-rounds bound the window."""
    num_jobs = window.rates.shape[0]
    jobs, types = np.nonzero(window.rates > 0)
    pairs = jobs.size
    if pairs == 0:
        return Plan(np.zeros((num_jobs, window.rates.shape[1]), dtype=int), np.zeros(num_jobs), True)
    n0, y0, steps0 = 0, pairs, 2 * pairs
    gain0 = steps0 + num_jobs
    span0 = gain0 + num_jobs
    pair = np.arange(pairs)
    job_rows = np.arange(num_jobs)
    rate = window.rates[jobs, types]
    moving = (window.running[jobs] != types).astype(float)
    slopes, intercepts = log_segments()
    total = window.done + window.left
    q_now = window.done / total
    log_now = np.min(intercepts[None, :] + slopes[None, :] * q_now[:, None], axis=1)
    segs = slopes.size
    blocks = [
        # the window's GPU-rounds of each type; at most the window's rounds per job
        (types, n0 + pair, window.gpus[jobs].astype(float), rounds * np.asarray(window.capacity, dtype=float)),
        (jobs, n0 + pair, np.ones(pairs), np.full(num_jobs, float(rounds))),
        # rounds on a type are a run there: n ≤ rounds · y
        (np.tile(pair, 2), np.concatenate([n0 + pair, y0 + pair]), np.repeat([1.0, -rounds], pairs), np.zeros(pairs)),
        # planned steps ≤ Σ rate × (round_s × n − restore × y where it moves)
        (
            np.concatenate([job_rows, jobs, jobs]),
            np.concatenate([steps0 + job_rows, n0 + pair, y0 + pair]),
            np.concatenate([np.ones(num_jobs), -rate * round_s, rate * window.restore_s[jobs] * moving]),
            np.zeros(num_jobs),
        ),
        # gain_j ≤ a_i + m_i · (done + steps) / total − log q_j now, for every segment i
        (
            np.tile(np.arange(num_jobs * segs), 2),
            np.concatenate([np.repeat(gain0 + job_rows, segs), np.repeat(steps0 + job_rows, segs)]),
            np.concatenate([np.ones(num_jobs * segs), -(slopes[None, :] / total[:, None]).ravel()]),
            (intercepts[None, :] + slopes[None, :] * q_now[:, None] - log_now[:, None]).ravel(),
        ),
        # the longest time left after the window: τ_j · (left − steps) ≤ M
        (
            np.tile(job_rows, 2),
            np.concatenate([steps0 + job_rows, np.full(num_jobs, span0)]),
            np.concatenate([-window.step_s, -np.ones(num_jobs)]),
            -window.step_s * window.left,
        ),
    ]
    rows, cols, vals, upper = [], [], [], []
    offset = 0
    for row, col, val, limit in blocks:
        rows.append(row + offset)
        cols.append(col)
        vals.append(val)
        upper.append(limit)
        offset += limit.size
    size = span0 + 1
    matrix = sparse.csr_array(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(offset, size)
    )
    cost = np.zeros(size)
    cost[gain0 : gain0 + num_jobs] = -window.weight / (num_jobs * rounds)
    cost[span0] = MAKESPAN_WEIGHT
    low, high = np.zeros(size), np.ones(size)
    high[n0 + pair] = rounds
    high[steps0 : steps0 + num_jobs] = window.left
    if bounded:
        low[steps0 : steps0 + num_jobs] = np.maximum(window.need, 0.0)
    high[gain0:] = np.inf
    integrality = np.zeros(size)
    integrality[:steps0] = 1
    solution = milp(
        cost,
        constraints=LinearConstraint(matrix, -np.inf, np.concatenate(upper)),
        integrality=integrality,
        bounds=Bounds(low, high),
        options={"node_limit": NODE_LIMIT, "mip_rel_gap": MIP_REL_GAP},
    )
    planned = np.zeros(window.rates.shape, dtype=int)
    if solution.x is None:
        return Plan(planned, np.zeros(num_jobs), False)
    planned[jobs, types] = np.rint(solution.x[n0 + pair]).astype(int)
    return Plan(planned, solution.x[steps0 : steps0 + num_jobs], True)


def first_round(window: Window, plan: Plan, rounds: int) -> dict[int, int]:
    """Round 0 of the plan (job row → type column): the jobs planned for every round of the window first, then those
    planned on the type they run on now (a pause would cost a restore), then the others furthest behind (ρ̂) first;
    each on the type it has most rounds on (ties: the one it runs on, then the cluster's order), where it fits."""
    free = np.asarray(window.capacity, dtype=int).copy()
    best = {j: int(np.lexsort((np.arange(row.size), row != row.max(), -row))[0]) for j, row in enumerate(plan.rounds)}
    best = {j: k for j, k in best.items() if plan.rounds[j, k] > 0}
    for j, row in enumerate(plan.rounds):
        if j in best and window.running[j] >= 0 and row[window.running[j]] == row.max():
            best[j] = int(window.running[j])
    first = {}
    for j in sorted(
        best,
        key=lambda j: (-int(plan.rounds[j].sum() >= rounds), -int(best[j] == window.running[j]), -window.rank[j], j),
    ):
        k = best[j]
        if window.gpus[j] <= free[k]:
            first[j] = k
            free[k] -= window.gpus[j]
    return first


class ShockwavePolicy(TunedJobsPolicy):
    """Plans a window of rounds for the Nash social welfare of progress within finish-time bounds; rigid jobs."""

    name: ClassVar[str] = "shockwave"
    settings: ClassVar[tuple[str, ...]] = ("restart_delay_s",)
    round_s: ClassVar[int | None] = ROUND_INTERVAL_S  # the Sia artifact's Shockwave interval; the window counts them

    def __init__(
        self,
        step_time: TypedStepTime | None = None,
        window_rounds: int = DEFAULT_WINDOW_ROUNDS,
        rhomax: float = DEFAULT_RHOMAX,
        restart_delay_s: float = float(RESTART_DELAY_S),
    ) -> None:
        """`window_rounds`: the rounds each plan covers; `rhomax`: the finish-time bound, × the fair finish time.
        `restart_delay_s`: what a (re)start costs a job whose view has no restore delay of its own."""
        if not (isinstance(window_rounds, int) and window_rounds >= 1):
            raise SpecError(f"shockwave window_rounds must be a whole number of rounds ≥ 1, got {window_rounds}")
        if not rhomax > 0:
            raise SpecError(f"shockwave rhomax must be a number > 0 (the finish-time bound), got {rhomax}")
        super().__init__(step_time)
        self.window_rounds = window_rounds
        self.rhomax = float(rhomax)
        self.restart_delay_s = float(restart_delay_s)
        self._finish: dict[str, _MeanFinish] = {}

    def optimize(self, jobs: Sequence[JobView], cluster: Cluster, now: float) -> PolicyResult:
        if not jobs:
            self._finish = {}
            return PolicyResult({})
        ordered = sorted(jobs, key=lambda job: job.name)
        names = [job.name for job in ordered]
        types = cluster.gpu_types
        fit = type_fits(ordered, cluster)
        rates = step_rates(ordered, fit, types, self._step_time)
        known = [j for j in range(len(ordered)) if rates[j].max() > 0]
        self._finish = {name: mean for name, mean in self._finish.items() if name in set(names)}
        window = self._window([ordered[j] for j in known], rates[known], cluster, now, len(ordered))
        plan = plan_window(window, self.window_rounds, self.round_s or ROUND_INTERVAL_S, bounded=True)
        relaxed = not plan.solved
        if relaxed:
            window = self._relaxed(window)
            plan = plan_window(window, self.window_rounds, self.round_s or ROUND_INTERVAL_S, bounded=False)
        first = first_round(window, plan, self.window_rounds)
        chosen = {names[known[row]]: types[k] for row, k in first.items()}
        time_left = np.full(len(ordered), math.inf)
        time_left[known] = window.left * window.step_s
        self._fill(ordered, fit, rates, chosen, time_left, cluster)
        planned = dict.fromkeys(names, 0) | {names[known[row]]: int(n) for row, n in enumerate(plan.rounds.sum(axis=1))}
        behind = dict.fromkeys(names, math.inf) | {names[known[row]]: float(r) for row, r in enumerate(window.rank)}
        reasons = {}
        for j, job in enumerate(ordered):
            if job.name in chosen:
                continue
            if not any(f.fits for f in fit[j]):
                reasons[job.name] = fits_no_type(fit[j])
            elif planned[job.name]:
                reasons[job.name] = (
                    f"waiting: ρ̂ {behind[job.name]:.2f}; planned for {planned[job.name]} of the next "
                    f"{self.window_rounds} rounds, not this one"
                )
            else:
                reasons[job.name] = (
                    f"waiting: ρ̂ {behind[job.name]:.2f}; not planned in the next {self.window_rounds} rounds, "
                    f"no GPUs left over"
                )
        return PolicyResult(
            allocations=place_rigid(ordered, chosen, cluster),
            reasons=reasons,
            batch=chosen_batches(ordered, fit, types, chosen),
            info={
                "planned_rounds": planned,
                "rho_hat": behind,
                "bounded": sorted(names[known[row]] for row in np.flatnonzero(window.need > 0)),
                "relaxed": relaxed,
            },
        )

    def _window(
        self, jobs: Sequence[JobView], rates: np.ndarray, cluster: Cluster, now: float, num_active: int
    ) -> Window:
        """This round's program input for the jobs of known speed (module docstring), `num_active` jobs in all;
        updates their momentum means."""
        types = cluster.gpu_types
        count = len(jobs)
        gpus = np.array([requested(job) for job in jobs])
        done, left = np.zeros(count), np.zeros(count)
        for j, job in enumerate(jobs):
            done[j], left[j] = steps_done_and_left(job, rates[j], types)
        left = np.where(done + left > 0, left, 1.0)  # nothing known of its work: one step from done
        step_s = np.array([np.mean(1.0 / row[row > 0]) for row in rates]).reshape(count)
        share = np.full(count, min(1.0, cluster.num_gpus / num_active))
        age = np.array([job.age_s(now) for job in jobs]).reshape(count)
        fair = np.zeros(count)
        for j, job in enumerate(jobs):
            estimate = (age[j] + left[j] * step_s[j]) / share[j]
            mean = self._finish.setdefault(job.name, _MeanFinish(now, now, estimate))
            fair[j] = mean.update(now, estimate)
        rank = (age + left * step_s / share) / fair
        restore = np.array(
            [job.restart_delay_s if job.restart_delay_s is not None else self.restart_delay_s for job in jobs]
        ).reshape(count)
        running = np.array([running_type(job, cluster, rates[j]) for j, job in enumerate(jobs)], dtype=int)
        window_s = self.window_rounds * (self.round_s or ROUND_INTERVAL_S)
        need = (age + window_s + left * step_s / share - self.rhomax * fair) * share / step_s
        most = np.array(
            [
                max(rates[j, k] * (window_s - (0 if running[j] == k else restore[j])) for k in range(len(types)))
                for j in range(count)
            ]
        ).reshape(count)
        need = np.where(need > np.minimum(most, left), -1.0, np.maximum(need, 0.0))
        weight = self._weights(rank, left * step_s, need < 0)
        return Window(
            rates,
            gpus,
            np.array([cluster.gpus_of_type(t) for t in types]),
            done,
            left,
            step_s,
            restore,
            running,
            need,
            weight,
            rank,
        )

    def _relaxed(self, window: Window) -> Window:
        """Every bound dropped, every job behind weighted (the artifact's relaxation)."""
        weight = self._weights(window.rank, window.left * window.step_s, np.ones(window.rank.size, dtype=bool))
        return Window(**{**window.__dict__, "need": np.zeros(window.rank.size), "weight": weight})

    def _weights(self, rank: np.ndarray, time_left_s: np.ndarray, weighted: np.ndarray) -> np.ndarray:
        """Log-utility weights: ρ̂^λ (ρ̂^100 when it could finish within a round) for the `weighted` jobs behind, 1
        for the others; scaled so that the largest is 1, none under `MIN_WEIGHT`."""
        power = np.where(time_left_s < (self.round_s or ROUND_INTERVAL_S), FINISHING_POWER, PRIORITY_POWER)
        log_weight = np.where(weighted & (rank > self.rhomax), power * np.log(np.maximum(rank, 1e-12)), 0.0)
        if log_weight.size == 0:
            return log_weight
        return np.maximum(np.exp(log_weight - log_weight.max()), MIN_WEIGHT)

    def _fill(
        self,
        ordered: Sequence[JobView],
        fit: Sequence[Sequence[TypeFit]],
        rates: np.ndarray,
        chosen: dict[str, str],
        time_left_s: np.ndarray,
        cluster: Cluster,
    ) -> None:
        """Idle GPUs to the jobs the plan does not run now, most time left first (unknown: first), each on the type
        it runs on now if there is room, else the fastest with room (ties: the cluster's order)."""
        types = cluster.gpu_types
        free = np.array([cluster.gpus_of_type(t) for t in types])
        for name, t in chosen.items():
            free[types.index(t)] -= requested(next(job for job in ordered if job.name == name))
        waiting = [j for j, job in enumerate(ordered) if job.name not in chosen]
        for j in sorted(waiting, key=lambda j: (-time_left_s[j], ordered[j].name)):
            job = ordered[j]
            room = [k for k in range(len(types)) if fit[j][k].fits and requested(job) <= free[k]]
            if not room:
                continue
            now_on = current_type(job, cluster)
            k = min(room, key=lambda k: (types[k] != now_on, -rates[j, k], k))
            chosen[job.name] = types[k]
            free[k] -= requested(job)


def running_type(job: JobView, cluster: Cluster, rates: np.ndarray) -> int:
    """The column of the type the job runs on now at its request, where it has a rate; -1 otherwise."""
    held = current_type(job, cluster)
    if held is None or sum(job.allocation) != requested(job):
        return -1
    k = cluster.gpu_types.index(held)
    return k if rates[k] > 0 else -1
