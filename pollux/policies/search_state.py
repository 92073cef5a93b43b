"""What every step of the Pollux policy's search reads and changes: one value table, one layout.

- `ValueTable`: every job's value (its term of the power mean; larger is better) on any allocation this round. A
  job's value depends only on its GPU count, whether it spans nodes, and whether it keeps its exact current
  allocation (no restart), so one (spans, GPUs) table per job and one number for keeping say it all. The one place
  a value is computed: one row (`of`), a whole layout (kept current by `Layout`), or many allocation matrices at
  once (`evaluate`, the fitness the genetic-algorithm yardstick and the tests score). What the count-first steps
  plan with, before anything is placed, is `planned`: each job's value by GPU count in its natural shape, keeping
  its allocation where the count is its current one.
- `TenantBudget`: under tenants' quotas, each job's tenant and how many GPUs of the table's type each tenant may
  hold this round; carried by the value table, so every step that grows a job reads the same budget.
- `greedy_counts`: the count step, GPUs handed out best gain per GPU first on each job's upper concave envelope
  (`ValueTable.best_step`), over one GPU type's table or several (the typed search's first choice of types).
- `Layout`: the allocation being searched, one sparse row per job (node → GPUs), with what the steps ask of it
  kept current: per job its GPUs, nodes, home node, value and whether it keeps its allocation; per node the free
  GPUs, the jobs on it and how many distributed jobs hold GPUs there; per tenant its GPUs, where the table has a
  budget. Rows change only through `Layout.set`;
  between `begin` and `undo` every change is recorded, so a trial move is made and taken back in place.
- `grow`: hand free GPUs to some jobs, best gain per GPU first: how the count-first steps fill what placement
  left, and how the polish lets jobs pushed aside regrow. Vectorized over the jobs; never past a tenant's budget.

Allocations stay sparse (a job holds GPUs on a few of up to thousands of nodes): nothing here walks a whole
allocation tuple per job except reading the jobs' current ones once.
"""

from __future__ import annotations

import functools
import heapq
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pollux.cluster import Allocation, Cluster
from pollux.policies.base import JobView

Row = dict[int, int]  # one job's GPUs per node, nodes without GPUs left out
MIN_GAIN = 1e-9  # gains at or below this are no gain


def sparse_row(allocation: Allocation) -> Row:
    """node → GPUs of an allocation tuple, without a Python step per node where GPUs per node fit a byte."""
    try:
        dense = np.frombuffer(bytes(allocation), dtype=np.uint8)
    except ValueError:  # more than 255 GPUs on a node (or a negative count): the slow way
        return {node: int(g) for node, g in enumerate(allocation) if g}
    nodes = np.flatnonzero(dense)
    return dict(zip(nodes.tolist(), dense[nodes].tolist(), strict=True))


def dense_row(row: Row, num_nodes: int) -> Allocation:
    allocation = [0] * num_nodes
    for node, gpus in row.items():
        allocation[node] = gpus
    return tuple(allocation)


@dataclass(frozen=True)
class TenantBudget:
    """Tenants' quotas on one GPU type this round: `tenant[j]`, the index of job j's tenant, and `gpus[i]`, the most
    GPUs of the type tenant i may hold (`pollux.quota` budgets them). The search never gives a tenant more."""

    tenant: np.ndarray  # (jobs,) int64
    gpus: np.ndarray  # (tenants,) int64

    def of(self, jobs: Sequence[int]) -> TenantBudget:
        """The same budgets over some of the jobs (one type's, in the typed search)."""
        return TenantBudget(self.tenant[np.asarray(jobs, dtype=np.int64)], self.gpus)

    def held(self, gpus: np.ndarray) -> np.ndarray:
        """GPUs per tenant, from GPUs per job."""
        return np.bincount(self.tenant, weights=gpus, minlength=self.gpus.size).astype(np.int64)


def tenant_budget(
    jobs: Sequence[JobView], budgets: Mapping[str, Mapping[str, int]], gpu_type: str, gpus: int
) -> TenantBudget:
    """The `TenantBudget` of `jobs` on `gpu_type` (of `gpus` GPUs) from `budgets[tenant][type]`: a tenant or type
    not there may hold none; no budget is above the type's GPUs. Tenants indexed in name order."""
    names = sorted({job.tenant for job in jobs})
    index = {name: i for i, name in enumerate(names)}
    return TenantBudget(
        np.array([index[job.tenant] for job in jobs], dtype=np.int64),
        np.array([min(max(budgets.get(name, {}).get(gpu_type, 0), 0), gpus) for name in names], dtype=np.int64),
    )


class ValueTable:
    """Every job's value on any allocation: `table[spans, job, K]` for K GPUs on one node (spans = 0) or across
    nodes (1), and `keep[job]` for its exact current allocation.

    The table is padded with -inf past each job's largest allowed count (and the largest node's worth of GPUs
    beyond the largest, so that steps up to a node's worth can be looked up without a bound check). Nodes may differ
    in size: `node_gpus` holds each node's GPUs, `max_node_gpus` the largest, which bounds every per-node step.
    `budget`: the tenants' quotas on this type, or None (no tenants: only node capacity bounds the jobs)."""

    def __init__(
        self,
        tables: Sequence[np.ndarray],
        keep: Sequence[float],
        current: Sequence[Row],
        allocations: Sequence[Allocation],
        cluster: Cluster,
        budget: TenantBudget | None = None,
    ) -> None:
        """`tables[j]`: job j's values, shape (2, max GPUs + 1); `keep[j]`: -inf when it holds nothing (or more
        than it may); `current[j]`: its allocation now, sparse, and `allocations[j]` the same as a tuple."""
        self.budget = budget
        self.num_jobs = len(tables)
        self.num_nodes = cluster.num_nodes
        self.num_gpus = cluster.num_gpus
        self.node_gpus = np.array(cluster.node_gpus, dtype=np.int64)
        self.max_node_gpus = max_node_gpus = cluster.max_gpus_per_node
        self.max_gpus = np.array([t.shape[1] - 1 for t in tables], dtype=np.int64)
        width = int(self.max_gpus.max(initial=0)) + max_node_gpus + 2
        self.table = np.full((2, self.num_jobs, width), -np.inf)
        for j, t in enumerate(tables):
            self.table[:, j, : t.shape[1]] = t
        self.keep = np.asarray(keep, dtype=np.float64)
        self.current = list(current)
        self.allocations = list(allocations)
        self.current_gpus = np.array([sum(r.values()) for r in self.current], dtype=np.int64)
        self.current_home = np.array([next(iter(r)) if len(r) == 1 else -1 for r in self.current], dtype=np.int64)
        counts = np.arange(width)
        # natural[j, K]: K GPUs in the job's natural shape (one node while the largest node holds them)
        self.natural = np.where(counts <= max_node_gpus, self.table[0], self.table[1])
        # planned[j, K]: the same, and at its current count the better of that and keeping its allocation
        self.planned = self.natural.copy()
        held = np.flatnonzero((self.current_gpus > 0) & (self.current_gpus < width))
        at = self.current_gpus[held]
        self.planned[held, at] = np.maximum(self.planned[held, at], self.keep[held])

    def of(self, job: int, row: Row) -> float:
        """The job's value on `row`."""
        count = sum(row.values())
        if count and row == self.current[job]:
            return float(self.keep[job])
        if count > self.max_gpus[job]:
            return -np.inf
        return float(self.table[int(len(row) > 1), job, count])

    def by_count(self, job: int, gpus: int) -> float:
        """The job's best value on `gpus` GPUs in its natural shape, keeping its allocation where the count is its
        current one (what the count-first steps plan with, before anything is placed: `planned`)."""
        return float(self.planned[job, gpus])

    def best_step(self, job: int, have: int, budget: int) -> tuple[float, int]:
        """The job's best gain per GPU (by `planned`) from `have` GPUs to any larger count within `budget` more:
        (ratio, new count), or (-inf, `have`) when it may not grow. Over every larger count, not only the next, so
        that jumps across non-concave steps are found (the upper concave envelope)."""
        top = min(int(self.max_gpus[job]), have + budget)
        if top <= have:
            return -np.inf, have
        gains = (self.planned[job, have + 1 : top + 1] - self.by_count(job, have)) / np.arange(1, top - have + 1)
        best = int(np.argmax(gains))
        return float(gains[best]), have + best + 1

    @functools.cached_property
    def _current_matrix(self) -> np.ndarray:
        return np.array(self.allocations, dtype=np.int64).reshape(self.num_jobs, -1)

    def evaluate(self, states: np.ndarray) -> np.ndarray:
        """Per-job values of many allocation matrices at once: `states` (P, jobs, nodes) → (P, jobs)."""
        states = np.asarray(states)
        gpus = states.sum(axis=2)
        spans = (np.count_nonzero(states, axis=2) > 1).astype(np.intp)
        jobs = np.arange(self.num_jobs)
        values = self.table[spans, jobs, np.minimum(gpus, self.table.shape[2] - 1)]
        kept = np.all(states == self._current_matrix, axis=2) & (self.current_gpus > 0)
        return np.where(kept, self.keep, values)


def greedy_counts(tables: Sequence[ValueTable], jobs: Sequence[JobView]) -> tuple[np.ndarray, np.ndarray]:
    """The count step: (table index, GPUs) per job (-1, 0 for a job given none), handing out GPUs best gain per GPU
    first (`ValueTable.best_step`), each table's GPUs its budget, and each tenant's budget on a table's type too.

    One table per GPU type, every job in each (one table: the one-type search). A job's table (its type) is settled
    by its first GPUs. Ties go to the job listed first among the least-served (the artifact orders jobs by attained
    service, then age), then to the table listed first."""
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].attained_service_gpu_s, jobs[i].submit_time_s))
    rank = {i: r for r, i in enumerate(order)}
    free = [values.num_gpus for values in tables]
    quotas = [None if v.budget is None else (v.budget.tenant, v.budget.gpus.copy()) for v in tables]  # GPUs left
    kind = np.full(len(jobs), -1, dtype=np.int64)
    counts = np.zeros(len(jobs), dtype=np.int64)

    def room(j: int, t: int) -> int:
        """GPUs of table t job j may still take: the type's free GPUs, within its tenant's budget there."""
        quota = quotas[t]
        return free[t] if quota is None else min(free[t], int(quota[1][quota[0][j]]))

    def best(j: int) -> tuple[float, int, int]:
        """Best (gain per GPU, table, new count) for job j within the budgets."""
        types = [int(kind[j])] if kind[j] >= 0 else range(len(tables))
        steps = [(*tables[t].best_step(j, int(counts[j]), room(j, t)), t) for t in types]
        ratio, target, t = max(steps, key=lambda s: (s[0], -s[2]))
        return ratio, t, target

    heap = []
    for j in range(len(jobs)):
        ratio, t, target = best(j)
        if ratio > 0:
            heap.append((-ratio, rank[j], t, j, target))
    heapq.heapify(heap)
    while heap and any(free):
        _, r, t, j, target = heapq.heappop(heap)
        need = target - int(counts[j])
        if need > room(j, t):  # stale: the budget shrank since this step was computed
            ratio, t, target = best(j)
            if ratio > 0:
                heapq.heappush(heap, (-ratio, r, t, j, target))
            continue
        kind[j], counts[j] = t, target
        free[t] -= need
        if (quota := quotas[t]) is not None:
            quota[1][quota[0][j]] -= need
        ratio, t, target = best(j)
        if ratio > 0:
            heapq.heappush(heap, (-ratio, r, t, j, target))
    return kind, counts


class Layout:
    """An allocation under search (see the module docstring). `rows[j]` must only be changed through `set`."""

    def __init__(self, values: ValueTable, rows: Sequence[Row] | None = None) -> None:
        jobs, nodes = values.num_jobs, values.num_nodes
        self.values = values
        self.max_node_gpus = values.max_node_gpus
        self.rows: list[Row] = [{} for _ in range(jobs)]
        self.gpus = np.zeros(jobs, dtype=np.int64)
        self.nodes = np.zeros(jobs, dtype=np.int64)  # nodes each job uses
        self.home = np.full(jobs, -1, dtype=np.int64)  # its node (the lowest, when it spans several); -1: none
        self.kept = np.zeros(jobs, dtype=bool)  # holds exactly its current, non-empty allocation
        self.value = values.natural[:, 0].copy()
        self.free = values.node_gpus.copy()
        self.spanning = np.zeros(nodes, dtype=np.int64)  # distributed jobs holding GPUs on each node
        self.on: list[set[int]] = [set() for _ in range(nodes)]  # the jobs holding GPUs on each node
        budget = values.budget
        self.budgeted = budget is not None
        self.tenant_of = np.zeros(0, dtype=np.int64) if budget is None else budget.tenant  # each job's tenant
        self.tenant_gpus = np.zeros(0 if budget is None else budget.gpus.size, dtype=np.int64)  # GPUs per tenant
        self._journal: list[tuple[int, Row, float]] | None = None
        for j, row in enumerate(rows or ()):
            if row:
                self.set(j, row)

    @property
    def num_jobs(self) -> int:
        return len(self.rows)

    def set(self, job: int, row: Row) -> None:
        """Give `job` the GPUs per node of `row` (zeros left out), keeping everything derived current. Rows are
        never changed in place, so `row` may be shared (with the value table's current rows, with a trial)."""
        old, values, free, on, spanning = self.rows[job], self.values, self.free, self.on, self.spanning
        if self._journal is not None:
            self._journal.append((job, old, float(self.value[job])))
        spread = len(old) > 1  # a step per node, not an index array: rows hold a few nodes
        for node, gpus in old.items():
            free[node] += gpus
            on[node].discard(job)
            if spread:
                spanning[node] -= 1
        if not all(row.values()):
            row = {node: gpus for node, gpus in row.items() if gpus}
        count = 0
        used = len(row)
        spread = used > 1
        for node, gpus in row.items():
            free[node] -= gpus
            on[node].add(job)
            count += gpus
            if spread:
                spanning[node] += 1
        self.rows[job] = row
        if self.budgeted:
            self.tenant_gpus[self.tenant_of[job]] += count - self.gpus[job]
        self.gpus[job] = count
        self.nodes[job] = used
        self.home[job] = min(row) if used else -1
        kept = self.kept[job] = used > 0 and row == values.current[job]
        if kept:
            self.value[job] = values.keep[job]
        else:
            self.value[job] = values.table[int(used > 1), job, count] if count <= values.max_gpus[job] else -np.inf

    def begin(self) -> None:
        """Start recording changes, to `undo` them (a trial)."""
        self._journal = []

    def changed(self) -> dict[int, tuple[Row, float]]:
        """Jobs changed since `begin`, in the order first changed: their row and value before."""
        before: dict[int, tuple[Row, float]] = {}
        for job, row, value in self._journal or ():
            before.setdefault(job, (row, value))
        return before

    def undo(self) -> None:
        """Restore every row changed since `begin`; recording stops."""
        journal, self._journal = self._journal or [], None
        for job, row, _ in reversed(journal):
            self.set(job, row)

    def room(self, jobs: np.ndarray) -> np.ndarray | None:
        """GPUs each of `jobs` may still take within its tenant's budget; None without budgets."""
        budget = self.values.budget
        if budget is None:
            return None
        tenant = budget.tenant[jobs]
        return np.maximum(budget.gpus[tenant] - self.tenant_gpus[tenant], 0)

    def within_budget(self) -> bool:
        """Whether no tenant holds more GPUs than its budget (always, without budgets)."""
        budget = self.values.budget
        return budget is None or bool(np.all(self.tenant_gpus <= budget.gpus))

    def allocation(self, job: int) -> Allocation:
        if self.kept[job]:
            return self.values.allocations[job]
        return dense_row(self.rows[job], len(self.free))

    def total(self) -> float:
        """Sum of the jobs' values, in job order (a larger sum is a fitter allocation)."""
        return sum(self.value.tolist())

    def held(self, job: int) -> np.ndarray:
        """Nodes where a distributed job other than `job` holds GPUs."""
        mine = self.spanning.copy()
        if len(self.rows[job]) > 1:
            mine[list(self.rows[job])] -= 1
        return mine > 0

    def pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(job, node, GPUs) of every job on every node it uses, by job, then node."""
        single = np.flatnonzero(self.nodes == 1)
        jobs, nodes, gpus = [single], [self.home[single]], [self.gpus[single]]
        for j in np.flatnonzero(self.nodes > 1).tolist():
            row = self.rows[j]
            jobs.append(np.full(len(row), j))
            nodes.append(np.fromiter(row, dtype=np.int64, count=len(row)))
            gpus.append(np.fromiter(row.values(), dtype=np.int64, count=len(row)))
        job, node, gpu = (np.concatenate(x).astype(np.int64) for x in (jobs, nodes, gpus))
        order = np.lexsort((node, job))
        return job[order], node[order], gpu[order]


def grow(layout: Layout, jobs: Sequence[int], avoid_interference: bool, reshape: bool = True) -> None:
    """Hand the free GPUs to `jobs`, one step at a time, the best gain per GPU first (ties: the job listed first),
    while any step gains, and never past a tenant's budget (`TenantBudget`).

    A job's step: more GPUs on its own nodes, the freest first, then (unless a node of its own hosts another
    distributed job, when avoiding interference) onto the freest nodes no other distributed job holds; or, for a
    job on one node or none, moving whole to the node with the most room for it. Growing counts per GPU added,
    moving per GPU added (at least one). Without `reshape`, a job on one node stays on it (the counts step planned
    it there) and only a job without GPUs moves, onto the freest node."""
    if not (len(jobs) and layout.free.any()):
        return
    steps = _Steps(layout, np.array(list(dict.fromkeys(jobs)), dtype=np.int64), avoid_interference, reshape)
    with np.errstate(invalid="ignore"):  # -inf - -inf: a step between two forbidden counts, never taken
        while layout.free.any():
            steps.update()
            pick = int(np.argmax(steps.ratio))
            if not steps.ratio[pick] > MIN_GAIN:
                return
            layout.set(int(steps.jobs[pick]), steps.row(pick))
            steps.changed(pick)


class _Steps:
    """The best step of each of `jobs` on `layout` (see `grow`), as of the last `update`: `ratio[i]`, its gain per
    GPU (-inf: none), and `row(i)`, the row it leads to."""

    def __init__(self, layout: Layout, jobs: np.ndarray, avoid: bool, reshape: bool) -> None:
        values = layout.values
        self.layout, self.jobs, self.avoid, self.reshape = layout, jobs, avoid, reshape
        self.top, self.keep = values.max_gpus[jobs], values.keep[jobs]
        self.current, self.current_home = values.current_gpus[jobs], values.current_home[jobs]
        self.table = values.table[:, jobs]  # the jobs' rows of the value table
        self.t = np.arange(1, layout.max_node_gpus + 1)  # GPUs of a move whole
        self.one = np.arange(jobs.size)
        # (position in `jobs`, node) of every node a distributed one uses, kept current through `changed`: what
        # `_room` sums over, in a few array steps rather than a step per distributed job per update
        spread = np.flatnonzero(layout.nodes[jobs] > 1)
        rows = [layout.rows[j] for j in jobs[spread].tolist()]
        self.spread_at = np.repeat(spread, [len(row) for row in rows])
        self.spread_node = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=self.spread_at.size)

    def changed(self, i: int) -> None:
        """`jobs[i]` was given a new row."""
        row = self.layout.rows[int(self.jobs[i])]
        others = self.spread_at != i
        self.spread_at, self.spread_node = self.spread_at[others], self.spread_node[others]
        if len(row) > 1:
            self.spread_at = np.concatenate([self.spread_at, np.full(len(row), i)])
            self.spread_node = np.concatenate([self.spread_node, np.fromiter(row, dtype=np.int64, count=len(row))])

    def update(self) -> None:
        layout, jobs = self.layout, self.jobs
        self.have, self.here = layout.gpus[jobs], layout.value[jobs]
        self.used, self.home = layout.nodes[jobs], layout.home[jobs]
        self.ratio = np.full(jobs.size, -np.inf)
        self.moved = np.zeros(jobs.size, dtype=np.int64)  # GPUs it moves whole to `target` with; 0: it grows
        self._room()
        self._grow()
        self._move(np.flatnonzero(self.used <= (1 if self.reshape else 0)))

    def row(self, i: int) -> Row:
        if self.moved[i]:
            return {int(self.target[i]): int(self.moved[i])}
        return _grown(self.layout, int(self.jobs[i]), int(self.added[i]), bool(self.blocked[i]), self.avoid)

    def _room(self) -> None:
        """Free GPUs on each job's own nodes; whether it may spread to others; how many GPUs it may add."""
        layout, jobs, free, used, home = self.layout, self.jobs, self.layout.free, self.used, self.home
        self.distributed = used > 1
        self.own_free = np.where(home >= 0, free[home], 0)  # free[-1] of a job without GPUs is masked
        at, nodes = self.spread_at, self.spread_node
        if at.size:
            own = np.bincount(at, weights=free[nodes], minlength=jobs.size).astype(np.int64)
            self.own_free = np.where(self.distributed, own, self.own_free)
        if self.avoid:  # onto nodes no distributed job holds, unless one holds a node of its own
            open_free = int(free[layout.spanning == 0].sum())
            open_home = (used == 1) & (layout.spanning[home] == 0)
            spread_free = open_free - np.where(open_home, self.own_free, 0)
            self.blocked = (used == 1) & ~open_home
            if at.size:  # a distributed job is blocked where another distributed job shares a node of its own
                shared = np.bincount(at, weights=layout.spanning[nodes] > 1, minlength=jobs.size) > 0
                self.blocked = np.where(self.distributed, shared, self.blocked)
        else:
            spread_free = int(free.sum()) - self.own_free
            self.blocked = np.zeros(jobs.size, dtype=bool)
        if not self.reshape:
            self.blocked |= used == 1
        reach = self.own_free + np.where(self.blocked, 0, spread_free)
        self.quota = layout.room(jobs)  # within the tenants' budgets, where there are any
        if self.quota is not None:
            reach = np.minimum(reach, self.quota)
        self.limit = np.where(used > 0, np.minimum(np.maximum(self.top - self.have, 0), reach), 0)

    def _grow(self) -> None:
        """Best growth: i more GPUs, its own nodes first (so it spans nodes once i passes their free GPUs)."""
        have, limit = self.have, self.limit
        steps = int(limit.max(initial=0))
        self.added = np.zeros(self.jobs.size, dtype=np.int64)
        if not steps:
            return
        added = np.arange(1, steps + 1)
        spans = (self.distributed[:, None] | (added > self.own_free[:, None])).astype(np.intp)
        counts = np.minimum(have[:, None] + added, self.table.shape[2] - 1)
        ratios = (self.table[spans, self.one[:, None], counts] - self.here[:, None]) / added
        ratios[added > limit[:, None]] = -np.inf
        back = np.flatnonzero((have < self.current) & (self.current <= have + limit) & (self.keep > -np.inf))
        for i in back.tolist():  # the step that lands on its current allocation is worth keeping it
            j, step = int(self.jobs[i]), int(self.current[i] - have[i])
            if _grown(self.layout, j, step, bool(self.blocked[i]), self.avoid) == self.layout.values.current[j]:
                ratios[i, step - 1] = (self.keep[i] - self.here[i]) / step
        k = np.argmax(ratios, axis=1)
        found = ratios[self.one, k]
        self.added = k + 1
        self.ratio = np.where(found > MIN_GAIN, found, -np.inf)

    def _move(self, movable: np.ndarray) -> None:
        """Best move of the `movable` jobs (on one node or none): t GPUs on the node with the most room for it,
        the freest node or its own (`argmax(free + row)`: ties to the lower index), if better than growing."""
        self.target = np.full(self.jobs.size, -1, dtype=np.int64)
        if not movable.size:
            return
        free, t = self.layout.free, self.t
        have, here, home = self.have[movable], self.here[movable], self.home[movable]
        freest = int(np.argmax(free))
        home_room = np.where(home >= 0, free[home] + have, -1)
        stay = (home == freest) | (home_room > free[freest]) | ((home_room == free[freest]) & (home < freest))
        target = np.where((home >= 0) & stay, home, freest)
        most = np.minimum(free[target] + np.where(target == home, have, 0), self.top[movable])
        if self.quota is not None:
            most = np.minimum(most, have + self.quota[movable])
        keep = self.keep[movable]
        kept = (self.current_home[movable] == target) & (keep > -np.inf)
        kept = kept[:, None] & (self.current[movable][:, None] == t)
        value = np.where(kept, keep[:, None], self.table[0][movable[:, None], t])
        ratios = (value - here[:, None]) / np.maximum(t - have[:, None], 1)
        ratios[(t > most[:, None]) | np.isnan(ratios)] = -np.inf
        k = np.argmax(ratios, axis=1)
        found = ratios[np.arange(movable.size), k]
        better = found > np.maximum(self.ratio[movable], MIN_GAIN)
        self.ratio[movable] = np.where(better, found, self.ratio[movable])
        self.moved[movable] = np.where(better, k + 1, 0)
        self.target[movable] = target


def _grown(layout: Layout, job: int, added: int, blocked: bool, avoid: bool) -> Row:
    """`job`'s row with `added` more GPUs: its own nodes, the freest first; then (unless `blocked`) the freest
    nodes it may spread onto."""
    free = layout.free
    row = dict(layout.rows[job])
    for node in sorted(row, key=lambda n: (-free[n], n)):
        take = min(int(free[node]), added)
        row[node] += take
        added -= take
    if added and not blocked:
        open_ = free > 0
        if avoid:
            open_ &= ~layout.held(job)
        open_[list(row)] = False
        nodes = np.flatnonzero(open_)
        for node in nodes[np.lexsort((nodes, -free[nodes]))].tolist():
            if not added:
                break
            row[node] = take = min(int(free[node]), added)
            added -= take
    return row
