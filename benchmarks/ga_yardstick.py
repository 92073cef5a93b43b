"""The yardstick our Pollux search is judged by: a genetic algorithm configured as the artifact's Pollux search.

NSGA-II from pymoo (the `bench` extra; nothing under `pollux/` imports pymoo), population 100, 100 generations,
warm-started from the previous round's population, over allocation matrices A[job, node]. The fitness is the one our
policy optimizes, `PolluxPolicy.evaluate` on `PolluxPolicy.value_table` (one fitness for both searches). The operators
follow the artifact's (`simulator/pollux.py` at petuum/adaptdl), rewritten here:

- mutation: per job, reset to the current allocation (p = 0.1); per job (p = 0.1), zero each entry (p = 0.1); then
  raise entries on nodes with a free GPU to a uniform value in [current, GPUs per node], with probability
  1/J + 1/(jobs on that node) − their product for jobs already there, 1/J for the others;
- crossover: one point over the jobs, swapping the rows before it between two parents;
- repair, with jobs ordered by attained service, then submit time: no two distributed jobs on one node (the earlier
  keeps it), at most `max_gpus` GPUs and 16 nodes per job (nodes taken in a random order), node capacity by
  cumulative sums in job order, and rows below `min_gpus` zeroed.

The artifact had a second objective (cluster utility, for its auto-scaling experiment) and then took the solution
best on the first; with a fixed cluster we give NSGA-II the first objective alone, which only helps its fitness.
Duplicates are eliminated by exact content (pymoo's default compares all pairs by distance, the same answer for
integer matrices but too slow with 10⁵ variables). Randomness comes from one seed drawn from the caller's
`numpy.random.Generator`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pymoo.algorithms.moo.nsga2 import NSGA2
from pymoo.core.crossover import Crossover
from pymoo.core.duplicate import DuplicateElimination
from pymoo.core.mutation import Mutation
from pymoo.core.problem import Problem
from pymoo.core.repair import Repair

from pollux.cluster import Allocation, Cluster
from pollux.policies.base import JobView
from pollux.policies.pollux import PolluxPolicy

MAX_NODES_PER_JOB = 16  # the artifact's repair caps a job at 16 nodes
RESET_P = 0.1  # mutation: chance a job's row returns to its current allocation
ZERO_ROW_P = 0.1  # mutation: chance a job's row has entries zeroed ...
ZERO_ENTRY_P = 0.1  # ... and the chance of each entry


@dataclass(frozen=True)
class GAResult:
    """The fittest allocation the GA found, its fitness, and what it cost."""

    allocations: dict[str, Allocation]
    fitness: float
    generations: int
    seconds: float


class _AllocationProblem(Problem):
    """Maximize Pollux's fitness over flattened (jobs × nodes) matrices; pymoo minimizes, so F = −fitness."""

    def __init__(self, policy: PolluxPolicy, jobs: list[JobView], cluster: Cluster, now: float) -> None:
        super().__init__(n_var=len(jobs) * cluster.num_nodes, n_obj=1, xl=0, xu=cluster.gpus_per_node, vtype=int)
        self.policy, self.cluster = policy, cluster
        self.values = policy.value_table(jobs, cluster, now)
        self.shape = (len(jobs), cluster.num_nodes)
        self.base = np.array([job.allocation for job in jobs], dtype=np.int64).reshape(self.shape)
        self.max_gpus = self.values.max_gpus
        self.min_gpus = np.array([job.min_gpus for job in jobs], dtype=np.int64)

    def states(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, dtype=np.int64).reshape(-1, *self.shape)

    def _evaluate(self, x, out, *args, **kwargs) -> None:
        out["F"] = -self.policy.evaluate(self.values, self.states(x))[:, None]


class _Mutation(Mutation):
    def _do(self, problem: _AllocationProblem, X, *args, random_state: np.random.Generator, **kwargs):
        rng, states = random_state, problem.states(X).copy()
        pop, jobs, _ = states.shape
        p, j = np.nonzero(rng.random((pop, jobs)) < RESET_P)
        states[p, j] = problem.base[j]
        p, j = np.nonzero(rng.random((pop, jobs)) < ZERO_ROW_P)
        rows = states[p, j]
        rows[rng.random(rows.shape) < ZERO_ENTRY_P] = 0
        states[p, j] = rows
        p, n = np.nonzero(states.sum(axis=1) < problem.cluster.gpus_per_node)  # only nodes with a free GPU grow
        columns = states[p, :, n]  # (free nodes, jobs)
        present = columns > 0
        p_any = 1.0 / jobs
        p_here = present / np.maximum(present.sum(axis=1, keepdims=True), 1)
        grow = rng.random(columns.shape) < p_any + p_here - p_any * p_here
        raised = rng.integers(columns, problem.cluster.gpus_per_node + 1)
        columns[grow] = raised[grow]
        states[p, :, n] = columns
        return states.reshape(pop, -1)


class _Crossover(Crossover):
    def __init__(self) -> None:
        super().__init__(n_parents=2, n_offsprings=2)

    def _do(self, problem: _AllocationProblem, X, *args, random_state: np.random.Generator, **kwargs):
        _, matings, _ = X.shape
        parents = X.reshape(2, matings, *problem.shape)
        jobs = problem.shape[0]
        swap = (np.arange(jobs)[None, :] < random_state.integers(jobs, size=(matings, 1)))[:, :, None]
        first = np.where(swap, parents[1], parents[0])
        second = np.where(swap, parents[0], parents[1])
        return np.stack([first, second]).reshape(2, matings, -1)


class _Repair(Repair):
    """The artifact's repair. Each step touches only the rows or columns that break its rule (the others pass
    through unchanged either way), which keeps 10⁷-entry populations affordable."""

    def _do(self, problem: _AllocationProblem, X, *args, random_state: np.random.Generator, **kwargs):
        states = problem.states(X).copy()
        gpn = problem.cluster.gpus_per_node
        if problem.policy.avoid_interference:  # one distributed job per node: the first in job order keeps it
            spans = (np.count_nonzero(states, axis=2) > 1)[:, :, None]
            distributed = (states > 0) & spans
            p, n = np.nonzero(distributed.sum(axis=1) > 1)
            columns = states[p, :, n]
            columns[np.cumsum(distributed[p, :, n], axis=1) > 1] = 0
            states[p, :, n] = columns
        too_big = states.sum(axis=2) > problem.max_gpus[None, :]
        p, j = np.nonzero(too_big | (np.count_nonzero(states, axis=2) > MAX_NODES_PER_JOB))
        if p.size:  # cap GPUs and nodes per job, taking its nodes in a random order
            order = np.argsort(random_state.random((p.size, problem.shape[1])), axis=1)
            rows = np.take_along_axis(states[p, j], order, axis=1)
            rows = np.diff(np.minimum(np.cumsum(rows, axis=1), problem.max_gpus[j][:, None]), axis=1, prepend=0)
            rows[np.cumsum(rows > 0, axis=1) > MAX_NODES_PER_JOB] = 0
            unshuffled = np.empty_like(rows)
            np.put_along_axis(unshuffled, order, rows, axis=1)
            states[p, j] = unshuffled
        p, n = np.nonzero(states.sum(axis=1) > gpn)  # node capacity, jobs in order
        states[p, :, n] = np.diff(np.minimum(np.cumsum(states[p, :, n], axis=1), gpn), axis=1, prepend=0)
        states[states.sum(axis=2) < problem.min_gpus[None, :]] = 0
        return states.reshape(len(states), -1)


class _SameMatrix(DuplicateElimination):
    """Exact duplicates, by content."""

    def _do(self, pop, other, is_duplicate):
        seen = set() if other is None else {np.asarray(ind.X, dtype=np.int64).tobytes() for ind in other}
        for i, ind in enumerate(pop):
            key = np.asarray(ind.X, dtype=np.int64).tobytes()
            is_duplicate[i] = key in seen
            seen.add(key)
        return is_duplicate


class ArtifactGA:
    """The artifact's search, round after round: keeps its last population to start the next round from."""

    def __init__(self, policy: PolluxPolicy, pop_size: int = 100, generations: int = 100) -> None:
        self.policy = policy
        self.pop_size = pop_size
        self.generations = generations
        self._last: tuple[int, dict[str, np.ndarray]] | None = None  # (nodes, job name → rows of the population)

    def search(
        self,
        jobs: Sequence[JobView],
        cluster: Cluster,
        now: float,
        rng: np.random.Generator,
        time_limit_s: float | None = None,
    ) -> GAResult:
        """The fittest allocation after `generations` generations, or fewer when `time_limit_s` runs out."""
        start = time.perf_counter()
        ordered = sorted(jobs, key=lambda job: (job.attained_service_gpu_s, job.submit_time_s))
        problem = _AllocationProblem(self.policy, ordered, cluster, now)
        algorithm = NSGA2(
            pop_size=self.pop_size,
            sampling=self._initial(ordered, problem),
            crossover=_Crossover(),
            mutation=_Mutation(),
            repair=_Repair(),
            eliminate_duplicates=_SameMatrix(),
        )
        algorithm.setup(problem, termination=("n_gen", self.generations), seed=int(rng.integers(2**31)))
        while algorithm.has_next():
            algorithm.next()
            if time_limit_s is not None and time.perf_counter() - start > time_limit_s:
                break
        states = problem.states(algorithm.pop.get("X"))
        fitness = -algorithm.pop.get("F")[:, 0]
        best = int(np.argmax(fitness))
        self._last = (cluster.num_nodes, {job.name: states[:, j] for j, job in enumerate(ordered)})
        allocations = {job.name: tuple(int(g) for g in states[best, j]) for j, job in enumerate(ordered)}
        return GAResult(
            allocations={name: alloc for name, alloc in allocations.items() if sum(alloc) > 0},
            fitness=float(fitness[best]),
            generations=int(algorithm.n_gen) - 1,
            seconds=time.perf_counter() - start,
        )

    def _initial(self, ordered: list[JobView], problem: _AllocationProblem) -> np.ndarray:
        """Last round's population with its rows matched by job name (new jobs: no GPUs), or the current
        allocations alone on the first round, as in the artifact."""
        if self._last is None or self._last[0] != problem.shape[1]:
            return problem.base.reshape(1, -1)
        rows = self._last[1]
        size = len(next(iter(rows.values())))
        states = np.zeros((size, *problem.shape), dtype=np.int64)
        for j, job in enumerate(ordered):
            if job.name in rows:
                states[:, j] = rows[job.name]
        return states.reshape(size, -1)
