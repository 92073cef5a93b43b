"""Pollux's cluster policy (OSDI'21 §4.2): the allocation that maximizes the power mean of per-job speedups.

    SPEEDUP_j(A_j) = max goodput on A_j / max goodput on the fair share (⌈G/J⌉ GPUs of one node)
    FITNESS_p(A)   = ((1/J) Σ_j (c·SPEEDUP_j·REALLOC_j + ε)^p)^(1/p)      p = −1 by default (fair)
    REALLOC_j      = max(T_j − R_j·δ, 0) / (T_j + δ) when A_j changes (age T_j, restarts R_j, restart delay δ)

c = nodes/GPUs (the artifact's scaling: a node's worth of GPUs scores 1) and ε = 1e-3 keep a job without GPUs
finite but very costly. Because the goodput of an allocation depends only on its GPU count K and on whether it
spans nodes, the fitness is a sum of per-job terms in (K_j, spans nodes, changed); only node capacity and
interference avoidance couple the jobs. The search exploits that (the artifact used a genetic algorithm):

1. **Counts.** Each job gets a value table over K = 0…max (single node for K ≤ GPUs per node, else spread over
   whole nodes; keeping its exact current allocation escapes the restart factor). A greedy on the best gain per GPU
   over all larger K (the upper concave envelope, so jumps across non-concave steps are found) hands out GPUs.
2. **Placement.** Kept jobs stay where they are; distributed jobs take the fullest-free nodes that host no other
   distributed job (when avoiding interference); single-node jobs go best-fit. What cannot be placed shrinks to
   the largest hole.
3. **Fill.** Leftover GPUs go, one at a time, to whichever job gains most from growing in place.
4. **Local search.** Moves of up to a node's worth of GPUs from one job to another, best first by the value
   tables, each re-placed, while the placed fitness improves.
5. **Polish** (`pollux.policies.polish`). One job at a time takes a new row (GPUs on one node, more on another
   node, back where it was, or a waiting job across nodes), pushing the jobs in its way aside, which then regrow;
   run from step 4's allocation and from everyone's current one, the fitter kept. It finds what the count-first
   steps cannot (a distributed job's remainder moved into a smaller hole so a whole node frees up).

The artifact applies REALLOC to every change, a waiting job's start included, and so does the simulator, for
fidelity with the published results. A service that runs a round the moment a job arrives or its crash back-off
ends values a waiting job's start undiscounted (`discount_starts=False`, the runtime's setting): at those moments
the artifact's factor is ≈ 0 (T ≈ 0 at an arrival; T < R·δ after early restarts), so the job would wait while GPUs
idle, for no gain: it pays the restart delay whenever it starts, and waiting saves none of it.

Everything is deterministic for the same inputs; nothing is random.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from pollux.cluster import Allocation, Cluster, num_nodes_used
from pollux.goodput import throughput
from pollux.policies.base import BatchOwner, JobView, Policy, PolicyResult
from pollux.policies.placement import fixed_batch_config
from pollux.policies.polish import JobValues, Polisher

EPSILON = 1e-3
MAX_MOVES = 50  # local-search moves per round
MOVE_TRIES = 6  # candidate moves re-placed per step before giving up


@dataclass
class _Options:
    """Per-job values of every GPU count this round (higher is better)."""

    job: JobView
    value: np.ndarray  # value[K]: K GPUs in the job's natural shape, restart factor applied where K ≠ current
    alt_value: np.ndarray  # alt_value[spans, K]: K GPUs on one node (0) or across nodes (1), restart factor applied
    keep_value: float  # value of keeping the exact current allocation (no restart); -inf when it has none
    current: int  # GPUs held now
    max_gpus: int


def speedup_table(job: JobView, fair_gpus: int, max_gpus: int) -> np.ndarray:
    """Speedups over the fair share for K = 0…max_gpus, row 0 on one node, row 1 across nodes.

    Jobs that have not run yet scale linearly (K / fair share), as the artifact assumes; jobs with a fixed batch
    have efficiency 1 and run at their fixed per-GPU split; adaptive jobs pick their best batch per allocation.
    """
    replicas = np.arange(max(max_gpus, fair_gpus) + 1)
    if job.throughput_params is None:
        table = np.vstack([replicas, replicas]) / fair_gpus
        return table[:, : max_gpus + 1]
    nodes = np.array([[1], [2]])
    if job.batch_size is None:
        fn = job.goodput_fn()
        assert fn is not None
        best = fn.optimize(nodes, replicas[None, :], job.max_batch_size, job.local_bsz_bounds, accumulation=True)
        goodput = best.goodput
    else:
        goodput = fixed_batch_goodput(job, nodes, replicas)
    base = goodput[0, fair_gpus]
    if base <= 0:  # the fair share cannot run this job: compare against its best single-node goodput instead
        base = max(float(goodput[0].max()), 1e-12)
    return goodput[:, : max_gpus + 1] / base


def fixed_batch_goodput(job: JobView, nodes: np.ndarray, replicas: np.ndarray) -> np.ndarray:
    """Throughput (efficiency ≡ 1) of a fixed-batch job at each replica count; 0 where the batch cannot split."""
    assert job.batch_size is not None and job.throughput_params is not None
    local = np.zeros(replicas.size, dtype=np.int64)
    accum = np.zeros(replicas.size, dtype=np.int64)
    valid = (replicas >= 1) & (replicas <= max(job.batch_size // job.local_bsz_bounds[0], 1))
    for k in replicas[valid]:
        local[k], accum[k] = fixed_batch_config(
            job.batch_size, int(k), job.init_batch_size, job.max_batch_size, job.local_bsz_bounds
        )
    rate = throughput(job.throughput_params, nodes, np.maximum(replicas, 1), np.maximum(local, 1), accum)
    return np.where(valid, rate, 0.0)


class PolluxPolicy(Policy):
    """Co-adaptive scheduling: GPUs by goodput; each job then picks its own batch size for what it gets."""

    name: ClassVar[str] = "pollux"
    batch_owner: ClassVar[BatchOwner] = "job"
    settings: ClassVar[tuple[str, ...]] = ("p", "restart_delay_s", "avoid_interference", "discount_starts")

    def __init__(
        self,
        p: float = -1.0,
        restart_delay_s: float = 30.0,
        avoid_interference: bool = True,
        discount_starts: bool = True,
    ) -> None:
        """`p`: power-mean exponent (−1 fair, 1 throughput); `restart_delay_s`: δ of the re-allocation factor;
        `avoid_interference`: never place two distributed jobs on one node; `discount_starts`: apply the
        re-allocation factor to starting a job that holds no GPUs too, as the artifact does (module docstring)."""
        self.p = float(p)
        self.restart_delay_s = float(restart_delay_s)
        self.avoid_interference = avoid_interference
        self.discount_starts = discount_starts

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

    def fitness(self, utilities: Sequence[float]) -> float:
        """The power mean itself, from the per-job terms."""
        mean = float(np.mean(utilities))
        if self.p == 0:
            return math.exp(mean)
        return (mean * np.sign(self.p)) ** (1.0 / self.p)

    def realloc_factor(self, job: JobView, now: float) -> float:
        """What a change of allocation leaves of the job's speedup: (T − R·δ)/(T + δ), or 1 for starting a job that
        holds no GPUs when starts are not discounted."""
        if not self.discount_starts and sum(job.allocation) == 0:
            return 1.0
        age = job.age_s(now)
        if age + self.restart_delay_s <= 0:
            return 1.0  # no restart cost and no age: nothing to weigh
        return max(age - job.num_restarts * self.restart_delay_s, 0.0) / (age + self.restart_delay_s)

    def options(self, jobs: Sequence[JobView], cluster: Cluster, now: float) -> list[_Options]:
        """Value tables of every job (see the module docstring)."""
        gpn = cluster.gpus_per_node
        fair = max(1, math.ceil(cluster.num_gpus / len(jobs)))
        scale = cluster.num_nodes / cluster.num_gpus
        result = []
        for job in jobs:
            top = max(0, min(job.max_gpus, cluster.num_gpus))
            table = speedup_table(job, fair, top)
            factor = self.realloc_factor(job, now)
            alt_value = self.utility(scale * table * factor)
            if job.min_gpus > 0:
                alt_value[:, 1 : min(job.min_gpus, top + 1)] = -np.inf
            value = np.where(np.arange(top + 1) <= gpn, alt_value[0], alt_value[1])
            current = sum(job.allocation)
            keep = -np.inf
            if 0 < current <= top:
                spans = 1 if num_nodes_used(job.allocation) > 1 else 0
                keep = float(self.utility(scale * table[spans, current]))
            result.append(_Options(job, value, alt_value, keep, current, top))
        return result

    def evaluate(self, opts: Sequence[_Options], states: np.ndarray, cluster: Cluster) -> np.ndarray:
        """Fitness of many candidate allocation matrices at once: `states` (P, J, nodes) → (P,).

        The one fitness every search is judged by (ours, and the genetic-algorithm yardstick in benchmarks/);
        node capacity and interference are the caller's to enforce (see `feasible`).
        """
        states = np.asarray(states)
        gpus = states.sum(axis=2)
        spans = np.count_nonzero(states, axis=2) > 1
        values = np.empty(gpus.shape)
        for j, opt in enumerate(opts):
            k = np.minimum(gpus[:, j], opt.max_gpus)
            values[:, j] = opt.value[k]
            natural_multi = k > cluster.gpus_per_node
            off_shape = spans[:, j] != natural_multi
            if np.any(off_shape & (k > 0)):  # e.g. 2 GPUs as 1+1: evaluate with the shape actually used
                table_row = np.where(spans[:, j], 1, 0)
                values[:, j] = np.where(off_shape & (k > 0), opt.alt_value[table_row, k], values[:, j])
            current = np.asarray(opt.job.allocation)
            if opt.current > 0:
                kept = np.all(states[:, j, :] == current, axis=1)
                values[:, j] = np.where(kept, opt.keep_value, values[:, j])
        return np.array([self.fitness(row) for row in values])

    def feasible(self, states: np.ndarray, cluster: Cluster) -> np.ndarray:
        """Which candidate matrices keep node capacity and (when avoiding interference) one distributed job per
        node."""
        states = np.asarray(states)
        ok = np.all(states.sum(axis=1) <= cluster.gpus_per_node, axis=1)
        if self.avoid_interference:
            spans = (np.count_nonzero(states, axis=2) > 1)[:, :, None]
            ok &= np.all(((states > 0) & spans).sum(axis=1) <= 1, axis=1)
        return ok

    # -- search ----------------------------------------------------------------------------------------------
    def optimize(self, jobs: Sequence[JobView], cluster: Cluster, now: float) -> PolicyResult:
        if not jobs:
            return PolicyResult({})
        opts = self.options(jobs, cluster, now)
        counts = self._counts(opts, cluster)
        allocations = self._polish(opts, self._improve(opts, self._layout(opts, counts, cluster), cluster), cluster)
        placed = {o.job.name: a for o, a in zip(opts, allocations, strict=True) if sum(a) > 0}
        reasons = {
            o.job.name: f"waiting: the fittest allocation of {cluster.num_gpus} GPUs among {len(jobs)} jobs gives "
            "it none"
            for o in opts
            if o.job.name not in placed
        }
        values = [self._value(o, a) for o, a in zip(opts, allocations, strict=True)]
        return PolicyResult(placed, reasons, info={"fitness": self.fitness(values)})

    def _polish(self, opts: list[_Options], allocs: list[Allocation], cluster: Cluster) -> list[Allocation]:
        """Step 5, from two starts: the allocation so far and the current one (the fitter result wins)."""
        jobs = [JobValues(o.alt_value, o.keep_value, o.job.allocation) for o in opts]
        polisher = Polisher(jobs, cluster.gpus_per_node, self.avoid_interference)
        starts = [allocs]
        if all(len(o.job.allocation) == cluster.num_nodes for o in opts):
            starts.append([o.job.allocation for o in opts])
        best, best_value = allocs, -np.inf
        for start in starts:
            polished = [tuple(row) for row in polisher.run(np.array(start)).tolist()]
            value = sum(self._value(o, a) for o, a in zip(opts, polished, strict=True))
            if value > best_value + 1e-12:
                best, best_value = polished, value
        return best

    def _value(self, opt: _Options, alloc: Allocation) -> float:
        if alloc == opt.job.allocation and opt.current > 0:
            return opt.keep_value
        if sum(alloc) > opt.max_gpus:
            return -np.inf
        return float(opt.alt_value[int(num_nodes_used(alloc) > 1), sum(alloc)])

    def _option_value(self, opt: _Options, gpus: int) -> float:
        """Best value of `gpus` GPUs: keeping the current allocation when the count is unchanged."""
        value = float(opt.value[gpus])
        return max(value, opt.keep_value) if gpus == opt.current else value

    def _best_step(self, opt: _Options, have: int, budget: int) -> tuple[float, int]:
        """Best gain per GPU over every larger count within `budget` more GPUs: (ratio, new count)."""
        top = min(opt.max_gpus, have + budget)
        if top <= have:
            return -np.inf, have
        candidates = opt.value[have + 1 : top + 1].copy()
        if have < opt.current <= top:
            candidates[opt.current - have - 1] = max(candidates[opt.current - have - 1], opt.keep_value)
        gains = (candidates - self._option_value(opt, have)) / np.arange(1, top - have + 1)
        best = int(np.argmax(gains))
        return float(gains[best]), have + best + 1

    def _counts(self, opts: list[_Options], cluster: Cluster) -> list[int]:
        """Greedy GPU counts on the upper concave envelope of each job's values; ties go to the job listed first
        among the least-served (the artifact orders jobs by attained service, then age)."""
        order = sorted(range(len(opts)), key=lambda i: (opts[i].job.attained_service_gpu_s, opts[i].job.submit_time_s))
        rank = {i: r for r, i in enumerate(order)}
        counts = [0] * len(opts)
        free = cluster.num_gpus
        heap = []
        for i, opt in enumerate(opts):
            ratio, target = self._best_step(opt, 0, free)
            if ratio > 0:
                heap.append((-ratio, rank[i], i, target))
        heapq.heapify(heap)
        while heap and free > 0:
            _, r, i, target = heapq.heappop(heap)
            need = target - counts[i]
            if need > free:  # stale: the budget shrank since this step was computed
                ratio, target = self._best_step(opts[i], counts[i], free)
                if ratio > 0:
                    heapq.heappush(heap, (-ratio, r, i, target))
                continue
            counts[i] = target
            free -= need
            ratio, target = self._best_step(opts[i], counts[i], free)
            if ratio > 0:
                heapq.heappush(heap, (-ratio, r, i, target))
        return counts

    def _layout(self, opts: list[_Options], counts: list[int], cluster: Cluster) -> list[Allocation]:
        allocations = self._place(opts, counts, cluster)
        self._fill(opts, allocations, cluster)
        return allocations

    def _improve(self, opts: list[_Options], allocs: list[Allocation], cluster: Cluster) -> list[Allocation]:
        """Local search: move d ≤ GPUs-per-node GPUs from one job to another while the fitness improves.

        The best moves by the value tables alone (separable, so all pairs at once) are tried in order, each
        re-placed; the first that really improves the placed fitness is taken. Stops when none does, or after
        `MAX_MOVES`."""
        values = np.full((len(opts), cluster.num_gpus + 2), -np.inf)
        for j, opt in enumerate(opts):
            values[j, : opt.max_gpus + 1] = opt.value
            if opt.current > 0:
                values[j, opt.current] = max(values[j, opt.current], opt.keep_value)
        rows = np.arange(len(opts))
        best = sum(self._value(o, a) for o, a in zip(opts, allocs, strict=True))
        for _ in range(MAX_MOVES):
            counts = np.array([sum(a) for a in allocs])
            here = values[rows, counts]
            candidates = []
            for d in range(1, cluster.gpus_per_node + 1):
                loss = np.where(counts >= d, here - values[rows, np.maximum(counts - d, 0)], np.inf)
                gain = values[rows, np.minimum(counts + d, values.shape[1] - 1)] - here
                donors, takers = np.argsort(loss)[:3], np.argsort(-gain)[:3]
                candidates += [
                    (gain[b] - loss[a], a, b, d) for a in donors for b in takers if a != b and gain[b] > loss[a]
                ]
            moved = False
            for _, a, b, d in sorted(candidates, reverse=True)[:MOVE_TRIES]:
                trial = counts.tolist()
                trial[a] -= d
                trial[b] += d
                layout = self._layout(opts, trial, cluster)
                total = sum(self._value(o, x) for o, x in zip(opts, layout, strict=True))
                if total > best + 1e-12:
                    allocs, best, moved = layout, total, True
                    break
            if not moved:
                break
        return allocs

    def _place(self, opts: list[_Options], counts: list[int], cluster: Cluster) -> list[Allocation]:
        """Turn counts into per-node allocations; shrink what cannot be placed."""
        gpn, n = cluster.gpus_per_node, cluster.num_nodes
        free = [gpn] * n
        distributed = [False] * n
        allocs: list[Allocation] = [cluster.empty()] * len(opts)

        def take(i: int, alloc: Allocation) -> None:
            allocs[i] = alloc
            spans = num_nodes_used(alloc) > 1
            for node, g in enumerate(alloc):
                free[node] -= g
                distributed[node] |= spans and g > 0

        def fits(alloc: Allocation) -> bool:
            spans = num_nodes_used(alloc) > 1
            return all(
                g <= free[node] and not (spans and self.avoid_interference and distributed[node] and g > 0)
                for node, g in enumerate(alloc)
            )

        pending = []
        for i, opt in enumerate(opts):  # kept jobs first, where they are
            if counts[i] == opt.current > 0 and fits(opt.job.allocation):
                take(i, opt.job.allocation)
            elif counts[i] > 0:
                pending.append(i)
        pending.sort(key=lambda i: -counts[i])
        for i in pending:
            alloc = self._spread(counts[i], free, distributed) if counts[i] > gpn else None
            if alloc is None:
                alloc = self._single(min(counts[i], gpn), free, distributed)
            if alloc is not None and self._option_value(opts[i], sum(alloc)) > self._option_value(opts[i], 0):
                take(i, alloc)
        return allocs

    def _spread(self, gpus: int, free: list[int], distributed: list[bool]) -> Allocation | None:
        """Across nodes that host no other distributed job, fullest-free first (so as few nodes as possible)."""
        eligible = [nd for nd in range(len(free)) if free[nd] > 0 and not (self.avoid_interference and distributed[nd])]
        eligible.sort(key=lambda nd: (-free[nd], nd))
        alloc = [0] * len(free)
        left = gpus
        for nd in eligible:
            if left == 0:
                break
            alloc[nd] = min(free[nd], left)
            left -= alloc[nd]
        return None if left else tuple(alloc)

    @staticmethod
    def _single(gpus: int, free: list[int], distributed: list[bool]) -> Allocation | None:
        """Best fit on one node; if no node has `gpus` free, the largest hole."""
        fitting = [nd for nd in range(len(free)) if free[nd] >= gpus]
        if fitting:
            node = min(fitting, key=lambda nd: (free[nd], nd))
        else:
            node = max(range(len(free)), key=lambda nd: (free[nd], -nd))
            gpus = free[node]
        if gpus <= 0:
            return None
        alloc = [0] * len(free)
        alloc[node] = gpus
        return tuple(alloc)

    def _fill(self, opts: list[_Options], allocs: list[Allocation], cluster: Cluster) -> None:
        """Hand leftover GPUs out, best gain per GPU first: a job grows on the nodes it uses (a distributed job
        also onto nodes that host no other distributed job); a job without GPUs starts on the freest node."""
        n = cluster.num_nodes
        free = [cluster.gpus_per_node - sum(a[nd] for a in allocs) for nd in range(n)]
        while sum(free) > 0:
            owner = [-1] * n  # the distributed job on each node, if any
            for i, alloc in enumerate(allocs):
                if num_nodes_used(alloc) > 1:
                    for nd, g in enumerate(alloc):
                        if g:
                            owner[nd] = i
            best: tuple[float, int, Allocation] | None = None
            for i, (opt, alloc) in enumerate(zip(opts, allocs, strict=True)):
                room = opt.max_gpus - sum(alloc)
                if room <= 0:
                    continue
                for grown in self._growths(alloc, i, free, owner, room):
                    extra = sum(grown) - sum(alloc)
                    gain = (self._value(opt, grown) - self._value(opt, alloc)) / extra
                    if gain > 0 and (best is None or gain > best[0]):
                        best = (gain, i, grown)
            if best is None:
                return
            _, i, grown = best
            for nd in range(n):
                free[nd] -= grown[nd] - allocs[i][nd]
            allocs[i] = grown

    def _growths(self, alloc: Allocation, job: int, free: list[int], owner: list[int], room: int):
        """Allocations reachable by adding 1…`room` GPUs without breaking a placement rule (see `_fill`)."""
        used = [nd for nd, g in enumerate(alloc) if g]
        if len(used) > 1:  # distributed: its own nodes first, then nodes no other distributed job holds
            others = [
                nd for nd in range(len(free)) if nd not in used and (owner[nd] == -1 or not self.avoid_interference)
            ]
            nodes = sorted(used, key=lambda nd: -free[nd]) + sorted(others, key=lambda nd: (-free[nd], nd))
        elif used:
            nodes = used
        else:
            nodes = [max(range(len(free)), key=lambda nd: (free[nd], -nd))]
        grown = list(alloc)
        for nd in nodes:
            for _ in range(free[nd]):
                if room == 0:
                    return
                grown[nd] += 1
                room -= 1
                yield tuple(grown)
