"""The last step of Pollux's search: move one job at a time, pushing others aside, while the fitness improves.

The count-first steps before it decide how many GPUs each job gets and then look for room; they miss allocations
that only a different arrangement makes possible (a job taking a whole node that a distributed job gives up by
moving its remainder into a smaller hole, a small job spanning two nodes because no node has room for it). Here a
move is one job's new row (its GPUs per node): some GPUs on one node, some more on a node it does not use yet, or
back to its current allocation. Jobs in the way lose GPUs on that node (the one losing least first; with
interference avoidance a distributed job leaves the nodes of a distributed mover); then the jobs that lost GPUs,
the jobs beside GPUs the mover freed, waiting jobs and the jobs that would gain most from spreading share the free
GPUs, best gain per GPU first. A move is taken when the sum of per-job values (the power mean's terms: a larger sum
is a fitter allocation) rises; the best of the tried moves is taken each time.

A job's value depends only on its GPU count, whether it spans nodes, and whether it keeps its exact current
allocation, so candidates are ranked by the mover's own gain before anything is placed, and the search stops as
soon as no untried candidate could beat the best gain found; moves back to a job's current allocation, which may
lose for the mover yet free what others need, are tried when nothing else helps. Everything is deterministic.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

MAX_MOVES = 40  # moves taken per round at most ...
JOB_MOVES = 2000  # ... and at most this many over the number of jobs (each move looks at every job), at least 2
MAX_TRIES = 60  # candidate rows placed per move at most
NODE_TRIES = 4  # target nodes tried per candidate
MAX_GROWERS = 8  # jobs (besides those a move touches) that may spread onto GPUs it frees
MIN_GAIN = 1e-9


@dataclass(frozen=True)
class JobValues:
    """What the polish needs of one job: values by (spans nodes, GPU count), and of keeping its allocation."""

    table: np.ndarray  # table[spans, K] for K = 0…max GPUs; -inf where not allowed
    keep_value: float  # -inf when it holds nothing
    allocation: tuple[int, ...]

    @property
    def max_gpus(self) -> int:
        return self.table.shape[1] - 1

    def of(self, row: np.ndarray) -> float:
        """The job's value on `row` (its GPUs per node), as `PolluxPolicy.evaluate` scores it."""
        count = int(row.sum())
        if count > self.max_gpus:
            return -np.inf
        if count and self.keep_value > -np.inf and tuple(row.tolist()) == self.allocation:
            return self.keep_value
        return float(self.table[int(np.count_nonzero(row) > 1), count])


class _Trial:
    """Rows changed over a fixed allocation, with the GPUs used and the distributed job of every node kept current."""

    def __init__(self, base: np.ndarray, used: np.ndarray, owner: np.ndarray) -> None:
        self.base = base
        self.rows: dict[int, np.ndarray] = {}
        self.used = used.copy()
        self.owner = owner.copy()  # the distributed job on each node, -1 for none

    def row(self, j: int) -> np.ndarray:
        return self.rows.get(j, self.base[j])

    def set(self, j: int, row: np.ndarray) -> None:
        old = self.row(j)
        self.used += row - old
        if np.count_nonzero(old) > 1:
            self.owner[self.owner == j] = -1
        if np.count_nonzero(row) > 1:
            self.owner[row > 0] = j
        self.rows[j] = row


class Polisher:
    """Local search over whole allocation rows; see the module docstring."""

    def __init__(self, jobs: list[JobValues], gpus_per_node: int, avoid_interference: bool) -> None:
        self.jobs = jobs
        self.gpn = gpus_per_node
        self.avoid = avoid_interference

    def run(self, alloc: np.ndarray) -> np.ndarray:
        """The polished allocation matrix (jobs × nodes); `alloc` is not changed."""
        alloc = np.array(alloc, dtype=np.int64)
        values = np.array([job.of(row) for job, row in zip(self.jobs, alloc, strict=True)])
        for _ in range(min(MAX_MOVES, max(2, JOB_MOVES // len(self.jobs)))):
            move = self._best_move(alloc, values)
            if move is None:
                break
            for j, row in move.items():
                alloc[j] = row
                values[j] = self.jobs[j].of(row)
        return alloc

    # -- choosing a move -------------------------------------------------------------------------------------
    def _best_move(self, alloc: np.ndarray, values: np.ndarray) -> dict[int, np.ndarray] | None:
        used = alloc.sum(axis=0)
        owner = np.full(alloc.shape[1], -1)
        for j in np.flatnonzero(np.count_nonzero(alloc, axis=1) > 1):
            owner[alloc[j] > 0] = j
        occupants = [np.flatnonzero(alloc[:, n]).tolist() for n in range(alloc.shape[1])]
        waiting = np.flatnonzero(alloc.sum(axis=1) == 0).tolist()
        extra = list(dict.fromkeys(waiting + self._growers(alloc, values)))  # may take what a move frees
        evict = self._eviction_costs(alloc, values, occupants)

        def gain_of(mover: int, row: np.ndarray) -> tuple[float, dict[int, np.ndarray]]:
            trial = _Trial(alloc, used, owner)
            self._apply(trial, mover, row, occupants, extra)
            changes = {j: r for j, r in trial.rows.items() if j == mover or not np.array_equal(r, alloc[j])}
            return sum(self.jobs[j].of(r) - values[j] for j, r in changes.items()), changes

        best_gain, best = MIN_GAIN, None
        for optimistic, j, kind, t, n in self._tries(alloc, values, used, evict):
            if optimistic > best_gain:
                gain, changes = gain_of(j, self._row(alloc, j, kind, t, n))
                if gain > best_gain:
                    best_gain, best = gain, changes
        if best is None:  # back where it was: may lose for the job yet free what others gain more from
            moved = [
                (values[j] - job.keep_value, j)
                for j, job in enumerate(self.jobs)
                if job.keep_value > -np.inf and tuple(alloc[j].tolist()) != job.allocation
            ]
            for _, j in sorted(moved)[:MAX_TRIES]:
                gain, changes = gain_of(j, self._row(alloc, j, "keep", 0, -1))
                if gain > best_gain:
                    best_gain, best = gain, changes
        return best

    def _candidates(self, alloc: np.ndarray, values: np.ndarray) -> list[tuple[float, int, str, int]]:
        """(the mover's own gain, job, kind, GPUs), best first. Kinds: "one" = that many GPUs on one node,
        "grow" = that many more GPUs on a node it does not use yet, "keep" = back to its current allocation,
        "wide" = a waiting job starting across nodes (its best count, and its least)."""
        found = []
        have = alloc.sum(axis=1)
        nodes = alloc.shape[1]
        for j, job in enumerate(self.jobs):
            if not have[j] and nodes > 1:
                wide = job.table[1, 2 : min(job.max_gpus, self.gpn * nodes) + 1] - values[j]
                for k in {int(np.argmax(wide)), int(np.argmax(np.isfinite(wide)))} if wide.size else ():
                    if wide[k] > MIN_GAIN:
                        found.append((wide[k], j, "wide", k + 2))
            top = min(self.gpn, job.max_gpus)
            for t in np.flatnonzero(job.table[0, 1 : top + 1] - values[j] > MIN_GAIN) + 1:
                found.append((job.table[0, t] - values[j], j, "one", int(t)))
            if have[j]:
                more = job.table[1, have[j] + 1 : have[j] + self.gpn + 1] - values[j]
                for t in np.flatnonzero(more > MIN_GAIN) + 1:
                    found.append((more[t - 1], j, "grow", int(t)))
            if job.keep_value - values[j] > MIN_GAIN:
                found.append((job.keep_value - values[j], j, "keep", 0))
        found.sort(key=lambda c: (-c[0], c[1], c[2], c[3]))
        return found

    def _tries(self, alloc: np.ndarray, values: np.ndarray, used: np.ndarray, evict: np.ndarray):
        """The `MAX_TRIES` most promising (own gain, job, kind, GPUs, target node) by own gain less what making
        room costs the jobs on the target node (`evict`), up to `NODE_TRIES` target nodes per candidate."""
        nodes = np.arange(alloc.shape[1])
        kept: list[tuple] = []  # a min-heap of the best MAX_TRIES, keyed by (estimate, then a stable order)
        for order, (optimistic, j, kind, t) in enumerate(self._candidates(alloc, values)):
            if len(kept) >= MAX_TRIES and optimistic <= kept[0][0]:
                break  # estimates never exceed own gains: nothing further can enter the list
            if kind in ("keep", "wide"):
                targets, estimates = [-1], [optimistic]
            else:
                need = np.clip(t - (self.gpn - used + alloc[j]), 0, self.gpn)
                estimate = optimistic - evict[int(kind == "grow"), nodes, need]
                allowed = nodes if kind == "one" else nodes[alloc[j] == 0]
                targets = allowed[np.lexsort((allowed, -estimate[allowed]))][:NODE_TRIES].tolist()
                estimates = estimate[targets].tolist()
            for rank, (n, value) in enumerate(zip(targets, estimates, strict=True)):
                entry = (value, -order, -rank, optimistic, j, kind, t, n)
                if len(kept) < MAX_TRIES:
                    heapq.heappush(kept, entry)
                elif entry > kept[0]:
                    heapq.heapreplace(kept, entry)
        return [entry[3:] for entry in sorted(kept, reverse=True)]

    def _row(self, alloc: np.ndarray, j: int, kind: str, t: int, n: int) -> np.ndarray:
        """Job `j`'s row after a move: `t` GPUs on node `n` alone ("one"), added on node `n` ("grow"), or its
        current allocation ("keep"), or `t` GPUs across nodes, the freest first, one at least on each ("wide")."""
        if kind == "keep":
            return np.array(self.jobs[j].allocation, dtype=np.int64)
        if kind == "wide":
            free = self.gpn - alloc.sum(axis=0)
            row = np.zeros(alloc.shape[1], dtype=np.int64)
            for cap in (np.maximum(free, 1), np.full(free.size, self.gpn)):
                for m in np.argsort(-free, kind="stable"):
                    row[m] += min(max(cap[m] - row[m], 0), t - int(row.sum()))
            return row
        row = np.zeros(alloc.shape[1], dtype=np.int64) if kind == "one" else alloc[j].copy()
        row[n] = t
        return row

    def _growers(self, alloc: np.ndarray, values: np.ndarray) -> list[int]:
        """The running jobs that gain most per GPU from a few more GPUs across nodes, best first."""
        have = alloc.sum(axis=1)
        ratios = []
        for j, job in enumerate(self.jobs):
            more = job.table[1, have[j] + 1 : have[j] + self.gpn + 1]
            if have[j] and more.size:
                ratio = float(np.max((more - values[j]) / np.arange(1, more.size + 1)))
                if ratio > MIN_GAIN:
                    ratios.append((-ratio, j))
        return [j for _, j in sorted(ratios)[:MAX_GROWERS]]

    def _eviction_costs(self, alloc: np.ndarray, values: np.ndarray, occupants: list[list[int]]) -> np.ndarray:
        """evict[spans, node, x]: what making room for x GPUs on a node costs the jobs there, at least: the least
        one job loses giving them up (spans = 0, a mover on one node), or (spans = 1, a distributed mover, with
        interference avoidance) what the distributed job there loses leaving the node plus the least one other job
        loses giving up the rest. inf where no one job can."""
        nodes = alloc.shape[1]
        single = np.full((2, nodes, self.gpn + 1), np.inf)  # [0]: any job; [1]: jobs on one node only
        single[:, :, 0] = 0.0
        leave = np.zeros((nodes, 2))  # (loss, GPUs) of the distributed job leaving each node
        for n, jobs in enumerate(occupants):
            for j in jobs:
                row = alloc[j].copy()
                distributed = np.count_nonzero(row) > 1
                for x in range(1, int(alloc[j, n]) + 1):
                    row[n] -= 1
                    loss = values[j] - self.jobs[j].of(row)
                    single[0, n, x] = min(single[0, n, x], loss)
                    if not distributed:
                        single[1, n, x] = min(single[1, n, x], loss)
                if distributed and self.avoid:
                    leave[n] = (loss, alloc[j, n])
        evict = single.copy()
        if self.avoid:
            rest = np.clip(np.arange(self.gpn + 1)[None, :] - leave[:, 1:2], 0, self.gpn).astype(int)
            evict[1] = leave[:, :1] + np.take_along_axis(single[1], rest, axis=1)
        return evict

    # -- one move --------------------------------------------------------------------------------------------
    def _apply(self, trial: _Trial, mover: int, new: np.ndarray, occupants: list[list[int]], extra: list[int]):
        """`mover` takes `new`: jobs in its way give way, then the free GPUs are shared out again (among the jobs
        that gave way and, when the mover freed GPUs, the jobs beside them and the `extra` ones)."""
        old = trial.base[mover]
        trial.set(mover, new)
        distributed = np.count_nonzero(new) > 1
        losers: list[int] = []
        for n in np.flatnonzero(new):
            others = [j for j in occupants[n] if j != mover]
            if self.avoid and distributed:  # a distributed job shares no node with another distributed job
                for j in others:
                    row = trial.row(j)
                    if row[n] and np.count_nonzero(row) > 1:
                        shrunk = row.copy()
                        shrunk[n] = 0
                        trial.set(j, shrunk)
                        losers.append(j)
            while trial.used[n] > self.gpn:
                over = int(trial.used[n]) - self.gpn
                choices = []
                for j in others:
                    row = trial.row(j)
                    if row[n]:
                        shrunk = row.copy()
                        shrunk[n] -= min(over, shrunk[n])
                        choices.append((self.jobs[j].of(row) - self.jobs[j].of(shrunk), j, shrunk))
                _, j, shrunk = min(choices, key=lambda c: (c[0], c[1]))
                trial.set(j, shrunk)
                losers.append(j)
            if self.avoid and distributed:
                trial.owner[n] = mover
        freed = np.flatnonzero(old > new)
        sharers = list(dict.fromkeys(losers))
        if freed.size:
            beside = {j for n in freed for j in occupants[n]}
            for j in sorted(beside) + extra:
                if j != mover and j not in sharers:
                    sharers.append(j)
        self._share(trial, sharers)

    def _share(self, trial: _Trial, jobs: list[int]) -> None:
        """Hand the free GPUs to `jobs`, best gain per GPU first (as the counts step does), while any gains."""
        while True:
            free = self.gpn - trial.used
            if not free.any():
                return
            best = None
            for j in jobs:
                found = self._step(trial, j, free)
                if found is not None and (best is None or found[0] > best[0]):
                    best = (found[0], j, found[1])
            if best is None:
                return
            trial.set(best[1], best[2])

    def _step(self, trial: _Trial, j: int, free: np.ndarray) -> tuple[float, np.ndarray] | None:
        """Job `j`'s best step on free GPUs, by gain per GPU added: grow on its nodes, then onto nodes no other
        distributed job uses; or (on one node or none) move whole to the node with the most room."""
        job, row = self.jobs[j], trial.row(j)
        have = int(row.sum())
        here = job.of(row)
        best_ratio, best = MIN_GAIN, None
        mine = np.flatnonzero(row)
        if mine.size:
            order = sorted(mine.tolist(), key=lambda n: -free[n])
            held = (trial.owner >= 0) & (trial.owner != j) if self.avoid else np.zeros(row.size, dtype=bool)
            if not held[mine].any():  # may spread without sharing a node with another distributed job
                spread = np.flatnonzero((row == 0) & ~held & (free > 0))
                order += sorted(spread.tolist(), key=lambda n: (-free[n], n))
            steps = np.repeat(order, free[order])[: max(job.max_gpus - have, 0)]
            if steps.size:
                counts = have + np.arange(1, steps.size + 1)
                spans = np.maximum.accumulate(~np.isin(steps, mine)) | (mine.size > 1)
                ratios = (job.table[spans.astype(int), counts] - here) / np.arange(1, steps.size + 1)
                k = int(np.argmax(ratios))
                if ratios[k] > best_ratio:
                    grown = row + np.bincount(steps[: k + 1], minlength=row.size)
                    ratio = (job.of(grown) - here) / (k + 1)  # exact, should it land on its current allocation
                    if ratio > best_ratio:
                        best_ratio, best = ratio, grown
        if mine.size <= 1:
            target = int(np.argmax(free + row))
            for t in range(1, min(int(free[target] + row[target]), job.max_gpus, self.gpn) + 1):
                moved = np.zeros(row.size, dtype=np.int64)
                moved[target] = t
                ratio = (job.of(moved) - here) / max(t - have, 1)
                if ratio > best_ratio:
                    best_ratio, best = ratio, moved
        return None if best is None else (best_ratio, best)
