"""Pollux's cluster policy (OSDI'21 §4.2): the allocation that maximizes the power mean of per-job speedups.

    SPEEDUP_j(A_j) = max goodput on A_j / max goodput on the fair share (⌈G/J⌉ GPUs of one node)
    FITNESS_p(A)   = ((1/J) Σ_j (c·SPEEDUP_j·REALLOC_j + ε)^p)^(1/p)      p = −1 by default (fair)
    REALLOC_j      = max(T_j − R_j·δ, 0) / (T_j + δ) when A_j changes (age T_j, restarts R_j, restart delay δ)

c = nodes/GPUs (the artifact's scaling: a node's worth of GPUs scores 1) and ε = 1e-3 keep a job without GPUs
finite but very costly. Because the goodput of an allocation depends only on its GPU count K and on whether it
spans nodes, the fitness is a sum of per-job terms in (K_j, spans nodes, changed); only node capacity and
interference avoidance couple the jobs. The search exploits that (the artifact used a genetic algorithm):

1. **Counts.** Each job gets a value table over K = 0…max (single node for K ≤ the largest node's GPUs, else
   spread over whole nodes; keeping its exact current allocation escapes the restart factor). A greedy on the best
   gain per GPU over all larger K (the upper concave envelope, so jumps across non-concave steps are found) hands
   out GPUs (`search_state.greedy_counts`, which the typed search runs over several types too).
2. **Placement.** Kept jobs stay where they are; distributed jobs take the fullest-free nodes that host no other
   distributed job (when avoiding interference); single-node jobs go best-fit. What cannot be placed shrinks to
   the largest hole.
3. **Fill.** Leftover GPUs go, one at a time, to whichever job gains most from growing in place
   (`search_state.grow`, as jobs regrow in step 5, but keeping the shape step 2 placed them in).
4. **Local search.** `Transfer`s of up to the largest node's worth of GPUs from one job to another, best first by
   the value tables, each re-placed, while the placed fitness improves.
5. **Polish** (`pollux.policies.polish`). One job at a time takes a new row (GPUs on one node, more on another
   node, back where it was, or a waiting job across nodes), pushing the jobs in its way aside, which then regrow;
   run from step 4's allocation and from everyone's current one, the fitter kept. It finds what the count-first
   steps cannot (a distributed job's remainder moved into a smaller hole so a whole node frees up).

**Tenants** (`optimize_within`, issue 29). Behind the engine's quota layer (`pollux.quota`) each tenant may hold at
most `budgets[tenant][type]` GPUs of each type this round. The fitness is unchanged, the power mean over all jobs;
the budgets only constrain. Each value table carries a `TenantBudget` (every job's tenant, every tenant's budget on
the table's type) and every step that grows a job reads it: the count greedy and the typed search's program (one
row per tenant and type) hand out no more; fill and regrowth (`grow`) stop at it; a transfer between two tenants
needs room in the taker's; a polish move never makes its job larger than its tenant's budget, and where it takes the
tenant past it the tenant's other jobs give way; the current allocation is a polish start only where it is within
the budgets. So a tenant over its budget (GPUs it borrowed, now reclaimed) is cut within the round, and since a job
on one GPU is worth far more than one on none (ε), by shrinking its elastic jobs (each then picks its own batch for
the smaller count) before stopping any. Budgets that cannot bind (one tenant owning every GPU) give `optimize`'s
result exactly.

The artifact applies REALLOC to every change, a waiting job's start included, and so does the simulator, for
fidelity with the published results. A service that runs a round the moment a job arrives or its crash back-off
ends values a waiting job's start undiscounted (`discount_starts=False`, the runtime's setting): at those moments
the artifact's factor is ≈ 0 (T ≈ 0 at an arrival; T < R·δ after early restarts), so the job would wait while GPUs
idle, for no gain: it pays the restart delay whenever it starts, and waiting saves none of it.

Every step reads one `ValueTable` (each job's value by GPU count and shape, and of keeping its allocation) and
builds or changes one kind of `Layout` (sparse rows, with free GPUs and distributed jobs per node kept current),
both in `pollux.policies.search_state`; a job's speedups come from `pollux.policies.speedup`. Everything is
deterministic for the same inputs; nothing is random.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from pollux.cluster import Allocation, Cluster, num_gpus
from pollux.defaults import EXPLORATION_FACTOR, EXPLORATION_FACTOR_REMAINING, RESTART_DELAY_S, SRPT_EXPONENT
from pollux.errors import SpecError
from pollux.policies.base import BatchOwner, JobView, Policy, PolicyResult
from pollux.policies.polish import Polisher
from pollux.policies.remaining import finish_factor, remaining_time_s, srpt_weights
from pollux.policies.replicas import lay_out_replicas, only_whole_replicas
from pollux.policies.search_state import (
    Layout,
    Row,
    TenantBudget,
    ValueTable,
    greedy_counts,
    grow,
    sparse_row,
    tenant_budget,
)
from pollux.policies.speedup import GoodputTables, speedups_and_base
from pollux.policies.typed_search import optimize_typed

EPSILON = 1e-3
MAX_MOVES = 50  # local-search moves per round
MOVE_TRIES = 6  # candidate moves re-placed per step before giving up


@dataclass(frozen=True)
class Transfer:
    """A local-search move (step 4): `gpus` GPUs from `donor` to `taker`, then every job placed afresh."""

    donor: int
    taker: int
    gpus: int


class PolluxPolicy(Policy):
    """Co-adaptive scheduling: GPUs by goodput; each job then picks its own batch size for what it gets."""

    name: ClassVar[str] = "pollux"
    batch_owner: ClassVar[BatchOwner] = "job"
    tenant_aware: ClassVar[bool] = True
    whole_replicas: ClassVar[bool] = True
    settings: ClassVar[tuple[str, ...]] = (
        "p",
        "restart_delay_s",
        "avoid_interference",
        "discount_starts",
        "remaining_work",
        "srpt",
        "explore",
    )

    def __init__(
        self,
        p: float = -1.0,
        restart_delay_s: float = float(RESTART_DELAY_S),
        avoid_interference: bool = True,
        discount_starts: bool = True,
        remaining_work: bool | None = None,
        srpt: float = SRPT_EXPONENT,
        explore: float = EXPLORATION_FACTOR_REMAINING,
    ) -> None:
        """`p`: power-mean exponent (−1 fair, 1 throughput); `restart_delay_s`: δ of the re-allocation factor;
        `avoid_interference`: never place two distributed jobs on one node; `discount_starts`: apply the
        re-allocation factor to starting a job that holds no GPUs too, as the artifact does (module docstring);
        `remaining_work`: weigh each job's remaining work, with the shortest-remaining-first exponent `srpt`
        (`pollux.policies.remaining`; False: the paper's Pollux; None: on clusters of several GPU types only), and
        where it does, lets an adaptive job grow to `explore` times the most GPUs it has run on, not twice
        (`explored`)."""
        if explore < 1:
            raise SpecError(f"pollux explore must be a number ≥ 1, times the GPUs a job has run on; got {explore}")
        self.p = float(p)
        self.restart_delay_s = float(restart_delay_s)
        self.avoid_interference = avoid_interference
        self.discount_starts = discount_starts
        self.remaining_work = remaining_work
        self.srpt = float(srpt)
        self.explore = float(explore)
        self.goodput_tables = GoodputTables()  # a cache of pure functions of their keys: no result depends on it

    @property
    def avoids_sharing(self) -> bool:
        return self.avoid_interference

    # -- fitness ---------------------------------------------------------------------------------------------
    def utility(self, scaled_speedup: np.ndarray | float) -> np.ndarray:
        """Per-job term of the power mean, oriented so that larger is better."""
        x = np.asarray(scaled_speedup, dtype=np.float64) + EPSILON
        if self.p == 0:
            return np.log(x)
        return np.sign(self.p) * x**self.p

    def fitness(self, utilities: Sequence[float] | np.ndarray) -> float:
        """The power mean itself, from the per-job terms."""
        mean = float(np.mean(utilities))
        if self.p == 0:
            return math.exp(mean)
        return (mean * np.sign(self.p)) ** (1.0 / self.p)

    def restart_delay(self, job: JobView) -> float:
        """δ: the job's own restart cost where its view has one (Sia's per-model checkpoint-restore delays), else
        the policy's."""
        return self.restart_delay_s if job.restart_delay_s is None else job.restart_delay_s

    def realloc_factor(self, job: JobView, now: float) -> float:
        """What a change of allocation leaves of the job's speedup: (T − R·δ)/(T + δ), or 1 for starting a job that
        holds no GPUs when starts are not discounted."""
        if not self.discount_starts and sum(job.allocation) == 0:
            return 1.0
        age = job.age_s(now)
        delay = self.restart_delay(job)
        if age + delay <= 0:
            return 1.0  # no restart cost and no age: nothing to weigh
        return max(age - job.num_restarts * delay, 0.0) / (age + delay)

    def uses_remaining_work(self, cluster: Cluster) -> bool:
        """Whether this round weighs the jobs' remaining work: `remaining_work`, or where it is None (the default),
        on a cluster of several GPU types only (docs/design.md, "Remaining work")."""
        return cluster.heterogeneous if self.remaining_work is None else self.remaining_work

    def explored(self, jobs: Sequence[JobView], cluster: Cluster) -> Sequence[JobView]:
        """The jobs with the GPU bound this round allows them: their views' (twice the GPUs each ran on), or where
        remaining work is weighed, `explore` times that many. There a young job's every doubling costs it a
        restore (Sia's cifar10: 50 s of a 7-minute run alone), and its 1-GPU throughput on every type is known."""
        if not self.uses_remaining_work(cluster) or self.explore == EXPLORATION_FACTOR:
            return jobs
        return [replace(job, max_gpus=job.max_gpus_exploring(self.explore)) for job in jobs]

    def remaining_terms(
        self, jobs: Sequence[JobView], cluster: Cluster, base_goodputs: Sequence[float]
    ) -> tuple[np.ndarray, list[float | None]]:
        """Per job, the weight of its power-mean term and its remaining time on its fair share (None: unknown, or
        remaining work not weighed), from its goodput there (`pollux.policies.remaining`)."""
        if not self.uses_remaining_work(cluster):
            return np.ones(len(jobs)), [None] * len(jobs)
        remaining = [remaining_time_s(job, base) for job, base in zip(jobs, base_goodputs, strict=True)]
        return srpt_weights(remaining, self.srpt), remaining

    def change_factor(
        self, job: JobView, now: float, speedups: np.ndarray, remaining_s: float | None
    ) -> np.ndarray | float:
        """What changing to each allocation leaves of the job's speedup there (`speedups`, unscaled): the
        re-allocation factor, times what the restart leaves of the time it has left there (`finish_factor`) where
        that is known and a start is discounted."""
        factor = self.realloc_factor(job, now)
        if remaining_s is None or (not self.discount_starts and sum(job.allocation) == 0):
            return factor
        return factor * finish_factor(speedups, remaining_s, self.restart_delay(job))

    def value_table(
        self, jobs: Sequence[JobView], cluster: Cluster, now: float, budget: TenantBudget | None = None
    ) -> ValueTable:
        """Every job's values this round (see the module docstring): the power mean's terms, restart factor
        applied, and the value of keeping the current allocation without it; `budget`: the tenants' quotas."""
        fair = max(1, math.ceil(cluster.num_gpus / len(jobs)))
        scale = cluster.num_nodes / cluster.num_gpus
        current = [sparse_row(job.allocation) for job in jobs]
        tables, keep = [], []
        gpu_type = cluster.gpu_types[0]
        tops = [max(0, min(job.max_gpus_on(gpu_type), cluster.num_gpus)) for job in jobs]
        speedups_bases = [
            speedups_and_base(job, fair, top, job.gpus_per_replica(gpu_type), cluster.max_gpus_per_node)
            for job, top in zip(jobs, tops, strict=True)
        ]
        weights, remaining = self.remaining_terms(jobs, cluster, [base for _, base in speedups_bases])
        for j, (job, row) in enumerate(zip(jobs, current, strict=True)):
            speedups = speedups_bases[j][0]
            factor = self.change_factor(job, now, speedups, remaining[j])
            values, kept = self.job_values(job, scale * speedups, factor, row, float(weights[j]))
            tables.append(only_whole_replicas(values, job.gpus_per_replica(gpu_type)))
            keep.append(kept)
        return ValueTable(tables, keep, current, [job.allocation for job in jobs], cluster, budget)

    def job_values(
        self, job: JobView, speedups: np.ndarray, factor: np.ndarray | float, row: Row, weight: float = 1.0
    ) -> tuple[np.ndarray, float]:
        """One job's row of a value table from its (scaled) speedups on K = 0…top GPUs: the power mean's terms with
        the re-allocation `factor` applied (one, or one per entry), times the job's `weight`, none below its
        minimum GPUs; and the value of keeping `row`, its current allocation (-inf when it holds nothing or more
        than `top`)."""
        values = weight * self.utility(speedups * factor)
        top = speedups.shape[1] - 1
        if job.min_gpus > 0:
            values[:, 1 : min(job.min_gpus, top + 1)] = -np.inf
        gpus = sum(row.values())
        keep = weight * float(self.utility(speedups[int(len(row) > 1), gpus])) if 0 < gpus <= top else -np.inf
        return values, keep

    def evaluate(self, values: ValueTable, states: np.ndarray) -> np.ndarray:
        """Fitness of many candidate allocation matrices at once: `states` (P, J, nodes) → (P,).

        The one fitness every search is judged by (ours, and the genetic-algorithm yardstick in benchmarks/);
        node capacity and interference are the caller's to enforce (see `feasible`); a job over its GPU bound
        makes a matrix worthless.
        """
        return np.array([self.fitness(row) for row in values.evaluate(states)])

    def feasible(self, states: np.ndarray, cluster: Cluster) -> np.ndarray:
        """Which candidate matrices keep node capacity and (when avoiding interference) one distributed job per
        node."""
        states = np.asarray(states)
        ok = np.all(states.sum(axis=1) <= np.asarray(cluster.node_gpus), axis=1)
        if self.avoid_interference:
            spans = (np.count_nonzero(states, axis=2) > 1)[:, :, None]
            ok &= np.all(((states > 0) & spans).sum(axis=1) <= 1, axis=1)
        return ok

    # -- search ----------------------------------------------------------------------------------------------
    def optimize(self, jobs: Sequence[JobView], cluster: Cluster, now: float) -> PolicyResult:
        return self._optimize(jobs, cluster, now, None)

    def optimize_within(
        self, jobs: Sequence[JobView], cluster: Cluster, now: float, budgets: Mapping[str, Mapping[str, int]]
    ) -> PolicyResult:
        """The same search with every tenant's GPUs of each type held to `budgets[tenant][type]` (module
        docstring); the fitness is still the power mean over all jobs."""
        return self._optimize(jobs, cluster, now, budgets)

    def _optimize(
        self, jobs: Sequence[JobView], cluster: Cluster, now: float, budgets: Mapping[str, Mapping[str, int]] | None
    ) -> PolicyResult:
        if not jobs:
            return PolicyResult({})
        jobs = self.explored(jobs, cluster)
        if cluster.heterogeneous:
            placed, value = optimize_typed(self, jobs, cluster, now, budgets)
        else:
            gpu_type = cluster.gpu_types[0]
            budget = None if budgets is None else tenant_budget(jobs, budgets, gpu_type, cluster.num_gpus)
            values = self.value_table(jobs, cluster, now, budget)
            layout = self.search(values, self._counts(values, jobs))
            placed = {job.name: layout.allocation(j) for j, job in enumerate(jobs) if layout.gpus[j] > 0}
            value = layout.value.tolist()
        if any(job.pipelined for job in jobs):
            placed = lay_out_replicas(jobs, placed, cluster, self.avoid_interference)
        return PolicyResult(
            placed, self._reasons(jobs, cluster, placed, budgets), info={"fitness": self.fitness(value)}
        )

    @staticmethod
    def _reasons(
        jobs: Sequence[JobView],
        cluster: Cluster,
        placed: Mapping[str, Allocation],
        budgets: Mapping[str, Mapping[str, int]] | None,
    ) -> dict[str, str]:
        """Why each job given no GPUs waits: its tenant's quota, where that is below the GPUs the job may use and
        the tenant holds all of it; else the fitness."""
        held: dict[str, int] = {}
        for job in jobs:
            held[job.tenant] = held.get(job.tenant, 0) + num_gpus(placed.get(job.name, ()))
        reasons = {}
        for job in jobs:
            if job.name in placed:
                continue
            capacity = {t: cluster.gpus_of_type(t) for t in cluster.gpu_types if job.may_run_on(t)}
            quota = sum(capacity.values())
            if budgets is not None:
                quota = sum(min(budgets.get(job.tenant, {}).get(t, 0), gpus) for t, gpus in capacity.items())
            if quota < sum(capacity.values()) and held[job.tenant] >= quota:
                reasons[job.name] = f"waiting: tenant {job.tenant} is at its quota ({quota} GPUs this round)"
            else:
                reasons[job.name] = (
                    f"waiting: the fittest allocation of {cluster.num_gpus} GPUs among {len(jobs)} jobs gives it none"
                )
        return reasons

    def search(self, values: ValueTable, counts: np.ndarray, round_jobs: int | None = None) -> Layout:
        """Steps 2-5 from the GPU counts of step 1: placement and fill, local search, polish. `round_jobs`: the
        round's jobs where `values` holds some of them (one GPU type's), for the polish's budget."""
        return self._polish(values, self._improve(values, self._layout(values, counts)), round_jobs)

    def _polish(self, values: ValueTable, layout: Layout, round_jobs: int | None = None) -> Layout:
        """Step 5, from two starts: the allocation so far and the current one (the fitter result wins)."""
        polisher = Polisher(self.avoid_interference, round_jobs)
        starts = [layout]
        if all(len(a) == values.num_nodes for a in values.allocations):
            current = Layout(values, values.current)
            if current.within_budget():  # a tenant holding more than its budget now must shrink: not a start
                starts.append(current)
        best, best_value = layout, -np.inf
        for start in starts:
            polisher.run(start)
            value = start.total()
            if value > best_value + 1e-12:
                best, best_value = start, value
        return best

    def _counts(self, values: ValueTable, jobs: Sequence[JobView]) -> np.ndarray:
        """Step 1: GPU counts by the count greedy (`search_state.greedy_counts`) on the one type's value table."""
        return greedy_counts([values], jobs)[1]

    def _layout(self, values: ValueTable, counts: np.ndarray) -> Layout:
        """Steps 2 and 3: place the counts, then hand what is left to whichever job gains most, in the shape it was
        placed in."""
        layout = self._place(values, counts)
        grow(layout, range(values.num_jobs), self.avoid_interference, reshape=False)
        return layout

    def _improve(self, values: ValueTable, layout: Layout) -> Layout:
        """Local search: move d ≤ the largest node's GPUs from one job to another while the fitness improves.

        The best moves by the value tables alone (separable, so all pairs at once) are tried in order, each
        re-placed; the first that really improves the placed fitness is taken. Stops when none does, or after
        `MAX_MOVES`."""
        by_count = values.planned
        rows = np.arange(values.num_jobs)
        best = layout.total()
        budget = values.budget
        for _ in range(MAX_MOVES):
            counts = layout.gpus.copy()
            here = by_count[rows, counts]
            room = layout.room(rows)
            candidates: list[tuple[float, Transfer]] = []
            for d in range(1, values.max_node_gpus + 1):
                loss = np.where(counts >= d, here - by_count[rows, np.maximum(counts - d, 0)], np.inf)
                gain = by_count[rows, np.minimum(counts + d, by_count.shape[1] - 1)] - here
                donors, takers = np.argsort(loss)[:3], np.argsort(-gain)[:3]
                pairs = [(a, b) for a in donors for b in takers]
                if room is not None and budget is not None:  # within the tenants' budgets (module docstring)
                    tenant = budget.tenant
                    pairs = [(a, b) for a, b in pairs if tenant[a] == tenant[b] or room[b] >= d]
                    open_takers = np.argsort(-np.where(room >= d, gain, -np.inf))[:3]
                    pairs += [(a, b) for a in donors for b in open_takers if tenant[a] != tenant[b] and room[b] >= d]
                    pairs = list(dict.fromkeys(pairs))
                candidates += [
                    (gain[b] - loss[a], Transfer(int(a), int(b), d)) for a, b in pairs if a != b and gain[b] > loss[a]
                ]
            candidates.sort(key=lambda c: (c[0], c[1].donor, c[1].taker, c[1].gpus), reverse=True)
            moved = False
            for _, move in candidates[:MOVE_TRIES]:
                trial = counts.copy()
                trial[move.donor] -= move.gpus
                trial[move.taker] += move.gpus
                candidate = self._layout(values, trial)
                total = candidate.total()
                if total > best + 1e-12:
                    layout, best, moved = candidate, total, True
                    break
            if not moved:
                break
        return layout

    def _place(self, values: ValueTable, counts: np.ndarray) -> Layout:
        """Step 2: counts to GPUs per node; what cannot be placed shrinks to the largest hole."""
        layout = Layout(values)
        pending = []
        for i, count in enumerate(counts.tolist()):  # kept jobs first, where they are
            if count == values.current_gpus[i] > 0 and self._fits(layout, values.current[i]):
                layout.set(i, values.current[i])
            elif count > 0:
                pending.append(i)
        pending.sort(key=lambda i: -counts[i])
        for i in pending:
            row = self._spread(layout, int(counts[i])) if counts[i] > values.max_node_gpus else None
            if row is None:
                row = self._single(layout, min(int(counts[i]), values.max_node_gpus))
            if row is not None and values.by_count(i, sum(row.values())) > values.by_count(i, 0):
                layout.set(i, row)
        return layout

    def _fits(self, layout: Layout, row: Row) -> bool:
        spans = len(row) > 1
        return all(
            g <= layout.free[n] and not (spans and self.avoid_interference and layout.spanning[n] > 0)
            for n, g in row.items()
        )

    def _spread(self, layout: Layout, gpus: int) -> Row | None:
        """Across nodes that host no other distributed job, fullest-free first (so as few nodes as possible)."""
        free = layout.free
        eligible = free > 0
        if self.avoid_interference:
            eligible &= layout.spanning == 0
        nodes = np.flatnonzero(eligible)
        nodes = nodes[np.lexsort((nodes, -free[nodes]))]
        taken = np.cumsum(free[nodes])
        if taken.size == 0 or taken[-1] < gpus:
            return None
        last = int(np.searchsorted(taken, gpus))
        row = dict(zip(nodes[:last].tolist(), free[nodes[:last]].tolist(), strict=True))
        row[int(nodes[last])] = gpus - int(taken[last - 1] if last else 0)
        return row

    @staticmethod
    def _single(layout: Layout, gpus: int) -> Row | None:
        """Best fit on one node; if no node has `gpus` free, the largest hole."""
        free = layout.free
        fitting = np.where(free >= gpus, free, np.iinfo(np.int64).max)
        node = int(np.argmin(fitting))
        if free[node] < gpus:
            node = int(np.argmax(free))
            gpus = int(free[node])
        return {node: gpus} if gpus > 0 else None
