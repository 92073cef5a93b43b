"""The last step of Pollux's search: move one job at a time, pushing others aside, while the fitness improves.

The count-first steps before it decide how many GPUs each job gets and then look for room; they miss allocations
that only a different arrangement makes possible (a job taking a whole node that a distributed job gives up by
moving its remainder into a smaller hole, a small job spanning two nodes because no node has room for it). Here a
`Move` is one job's new row (its GPUs per node): some GPUs on one node, some more on a node it does not use yet, or
back to its current allocation. Jobs in the way lose GPUs on that node (the one losing least first; with
interference avoidance a distributed job leaves the nodes of a distributed mover); then the jobs that lost GPUs,
the jobs beside GPUs the mover freed, waiting jobs and the jobs that would gain most from spreading share the free
GPUs (`search_state.grow`). A move is taken when the sum of per-job values (the power mean's terms: a larger sum
is a fitter allocation) rises; the best of the tried moves is taken each time. Each move is tried on the one
`Layout` and undone.

Under tenants' budgets (`search_state.TenantBudget`) a mover never holds more than its tenant's budget; where its
move takes its tenant past the budget, the tenant's other jobs give way (the one losing least first) as jobs in its
way on a node do, and regrow only within the budget, so every move keeps every tenant within its budget.

A job's value depends only on its GPU count, whether it spans nodes, and whether it keeps its exact current
allocation, so candidates are ranked by the mover's own gain less what making room costs the jobs already on the
target node, for every job, kind and node at once (arrays, no loop per job), before anything is placed; of the
`MAX_TRIES` best, those whose own gain could still beat the best gain found are placed. Moves back to a job's
current allocation, which may lose for the mover yet free what others need, are tried when nothing else helps.
As the moves per round, the rows placed per move are bounded by the round's jobs (`JOB_TRIES`): each placed row
regrows jobs, and in a round of hundreds of jobs the winner is nearly always among the first few candidates while
the last move of each run, which finds nothing, places them all. Everything is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from pollux.policies.search_state import MIN_GAIN, Layout, Row, grow

MAX_MOVES = 40  # moves taken per round at most ...
JOB_MOVES = 2000  # ... and at most this many over the number of jobs (each move looks at every job), at least 2
MAX_TRIES = 60  # candidate rows placed per move at most ...
JOB_TRIES = 4000  # ... and at most this many over the number of jobs (each placed row regrows some of them) ...
MIN_TRIES = 16  # ... but at least this many
NODE_TRIES = 4  # target nodes tried per candidate
MAX_GROWERS = 8  # jobs (besides those a move touches) that may spread onto GPUs it frees


class MoveKind(IntEnum):
    """What a move does to its job's row. The order breaks ties between candidates of equal gain."""

    GROW = 0  # `gpus` more GPUs on `node`, a node it does not use yet
    KEEP = 1  # back to its current allocation
    ONE = 2  # `gpus` GPUs on `node` alone
    WIDE = 3  # a waiting job starting on `gpus` GPUs across nodes, the freest first, at least one on each


@dataclass(frozen=True)
class Move:
    """One job's new row, before the jobs in its way give way."""

    job: int
    kind: MoveKind
    gpus: int = 0
    node: int = -1  # the target node of ONE and GROW

    def row(self, layout: Layout) -> Row:
        if self.kind is MoveKind.ONE:
            return {self.node: self.gpus}
        if self.kind is MoveKind.GROW:
            return {**layout.rows[self.job], self.node: self.gpus}
        if self.kind is MoveKind.KEEP:
            return dict(layout.values.current[self.job])
        free = layout.free
        row: Row = {}
        placed = 0
        for cap in (np.maximum(free, 1), layout.values.node_gpus):
            for node in np.argsort(-free, kind="stable").tolist():
                if placed == self.gpus:
                    return row
                add = min(max(int(cap[node]) - row.get(node, 0), 0), self.gpus - placed)
                if add:
                    row[node] = row.get(node, 0) + add
                    placed += add
        return row


class Polisher:
    """Local search over whole allocation rows; see the module docstring."""

    def __init__(self, avoid_interference: bool, round_jobs: int | None = None) -> None:
        """`round_jobs`: the jobs of the whole round, where the layout holds some of them (one GPU type's), so that
        the moves of a round stay bounded by its jobs, however many types it splits into."""
        self.avoid = avoid_interference
        self.round_jobs = round_jobs
        self.max_tries = MAX_TRIES

    def run(self, layout: Layout) -> None:
        """Polish `layout` in place."""
        jobs = self.round_jobs or layout.num_jobs
        self.max_tries = min(MAX_TRIES, max(MIN_TRIES, JOB_TRIES // jobs))
        for _ in range(min(MAX_MOVES, max(2, JOB_MOVES // jobs))):
            changes = self._best_move(layout)
            if changes is None:
                break
            for job, row in changes.items():
                layout.set(job, row)

    # -- choosing a move -------------------------------------------------------------------------------------
    def _best_move(self, layout: Layout) -> dict[int, Row] | None:
        """The rows the fittest tried move changes, or None when no move gains."""
        extra = self._extra(layout)
        best_gain, best = MIN_GAIN, None
        for optimistic, move in self.tries(layout):
            if optimistic > best_gain:
                gain, changes = self.gain_of(layout, move, extra)
                if gain > best_gain:
                    best_gain, best = gain, changes
        if best is None:  # back where it was: may lose for the job yet free what others gain more from
            keep = layout.values.keep
            moved = np.flatnonzero((keep > -np.inf) & ~layout.kept & self._fits_budget(layout))
            loss = layout.value[moved] - keep[moved]
            for j in moved[np.lexsort((moved, loss))][: self.max_tries].tolist():
                gain, changes = self.gain_of(layout, Move(j, MoveKind.KEEP), extra)
                if gain > best_gain:
                    best_gain, best = gain, changes
        return best

    @staticmethod
    def _fits_budget(layout: Layout) -> np.ndarray:
        """Which jobs' current allocations fit their tenant's budget alone (all, without budgets)."""
        values = layout.values
        if values.budget is None:
            return np.ones(values.num_jobs, dtype=bool)
        return values.current_gpus <= values.budget.gpus[values.budget.tenant]

    def _extra(self, layout: Layout) -> list[int]:
        """Jobs that may take what any move frees: the waiting ones and the best growers."""
        return list(dict.fromkeys(np.flatnonzero(layout.gpus == 0).tolist() + self._growers(layout)))

    @np.errstate(invalid="ignore")
    def gain_of(self, layout: Layout, move: Move, extra: list[int] | None = None) -> tuple[float, dict[int, Row]]:
        """What `move` gains over all jobs, and the rows it changes (the jobs in its way give way, then free GPUs
        go to them, to the jobs beside what it freed, and to `extra`); `layout` is left as it was."""
        if extra is None:
            extra = self._extra(layout)
        new = move.row(layout)
        layout.begin()
        self._apply(layout, move.job, new, extra)
        before = layout.changed()
        changes = {j: layout.rows[j] for j, (row, _) in before.items() if j == move.job or layout.rows[j] != row}
        gain = sum(float(layout.value[j]) - before[j][1] for j in changes)
        layout.undo()
        return gain, changes

    def _candidates(self, layout: Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(the mover's own gain, job, kind, GPUs) of every move that gains for its mover, best first (ties: job,
        kind, GPUs). WIDE moves try a waiting job's best count across nodes, and its least."""
        values, gpn, nodes = layout.values, layout.max_node_gpus, layout.values.num_nodes
        table, top, value, have = values.table, values.max_gpus, layout.value, layout.gpus
        jobs = np.arange(layout.num_jobs)
        found: list[tuple[np.ndarray, np.ndarray, MoveKind, np.ndarray]] = []

        def add(gain: np.ndarray, ok: np.ndarray, kind: MoveKind, gpus: np.ndarray) -> None:
            ok &= gain > MIN_GAIN
            j = np.broadcast_to(jobs[:, None] if gain.ndim > 1 else jobs, ok.shape)[ok]
            found.append((gain[ok], j, kind, np.broadcast_to(gpus, ok.shape)[ok]))

        step = np.arange(1, gpn + 1)
        budget = values.budget
        if budget is not None:  # a mover never holds more than its tenant's budget
            top = np.minimum(top, budget.gpus[budget.tenant])
        if nodes > 1:
            most = np.minimum(top, values.num_gpus)
            starts = (have == 0) & (most >= 2)
            counts = np.arange(2, max(int(most.max(initial=0)), 2) + 1)
            wide = np.where(counts <= most[:, None], table[1][:, counts] - value[:, None], -np.inf)
            rows = np.arange(wide.shape[0])
            best, least = np.argmax(wide, axis=1), np.argmax(np.isfinite(wide), axis=1)
            add(wide[rows, best], starts.copy(), MoveKind.WIDE, best + 2)
            add(wide[rows, least], starts & (least != best), MoveKind.WIDE, least + 2)
        add(table[0][:, 1 : gpn + 1] - value[:, None], step <= top[:, None], MoveKind.ONE, step)
        more = np.minimum(have[:, None] + step, table.shape[2] - 1)
        add(
            table[1][jobs[:, None], more] - value[:, None],
            (have > 0)[:, None] & (more <= top[:, None]),
            MoveKind.GROW,
            step,
        )
        add(values.keep - value, values.current_gpus <= top, MoveKind.KEEP, np.zeros(jobs.size, dtype=np.int64))
        gain = np.concatenate([f[0] for f in found])
        job = np.concatenate([f[1] for f in found])
        kind = np.concatenate([np.full(f[0].size, f[2]) for f in found])
        gpus = np.concatenate([f[3] for f in found])
        order = np.lexsort((gpus, kind, job, -gain))
        return gain[order], job[order], kind[order], gpus[order]

    @np.errstate(invalid="ignore")  # -inf - -inf: a gain between two forbidden allocations, never tried
    def tries(self, layout: Layout) -> list[tuple[float, Move]]:
        """The `max_tries` (`MAX_TRIES`, fewer in a round of many jobs) most promising (own gain, move) by own gain
        less what making room costs the jobs on the target node (`_eviction_costs`), up to `NODE_TRIES` target nodes
        per candidate, best first (ties: the better candidate, then the better node)."""
        pairs = layout.pairs()
        gain, job, kind, gpus = self._candidates(layout)
        cand, node, estimate, rank = self._targets(
            layout, self._eviction_costs(layout, pairs), pairs, gain, job, kind, gpus
        )
        whole = np.flatnonzero((kind == MoveKind.KEEP) | (kind == MoveKind.WIDE))  # no target node
        cand = np.concatenate([cand, whole])
        node = np.concatenate([node, np.full(whole.size, -1)])
        estimate = np.concatenate([estimate, gain[whole]])
        rank = np.concatenate([rank, np.zeros(whole.size, dtype=np.int64)])
        best = np.lexsort((rank, cand, -estimate))[: self.max_tries]
        return [
            (float(gain[c]), Move(int(job[c]), MoveKind(int(kind[c])), int(gpus[c]), int(n)))
            for c, n in zip(cand[best].tolist(), node[best].tolist(), strict=True)
        ]

    def _targets(self, layout: Layout, evict: np.ndarray, pairs, gain, job, kind, gpus):
        """For each ONE and GROW candidate (by index `cand`), its `NODE_TRIES` best target nodes by own gain less
        eviction cost: (cand, node, estimate, rank among the candidate's nodes)."""
        gpn, nodes, free, size = layout.max_node_gpus, layout.values.num_nodes, layout.free, layout.values.node_gpus
        pair_job, pair_node, pair_gpus = pairs
        # on a node the mover does not use, making room depends only on the node and the GPUs wanted: rank the
        # nodes once per (spans, GPUs), then skip each mover's own nodes and the nodes too small for them
        need = np.clip(np.arange(1, gpn + 1)[:, None] - free[None, :], 0, gpn)
        cost = np.stack([evict[s][np.arange(nodes), need] for s in (0, 1)])  # cost[spans, GPUs - 1, node]
        by_cost = np.argsort(cost, axis=2, kind="stable")
        small = np.arange(1, gpn + 1)[:, None] > size[None, :]  # small[GPUs - 1, node]: the node cannot hold them
        if small.any():  # nodes too small last, so the first `width` hold every node that fits, if fewer
            small_by_cost = np.take_along_axis(np.broadcast_to(small, cost.shape), by_cost, axis=2)
            by_cost = np.take_along_axis(by_cost, np.argsort(small_by_cost, axis=2, kind="stable"), axis=2)
        placed = np.flatnonzero((kind == MoveKind.ONE) | (kind == MoveKind.GROW))
        c_job, c_gpus, c_gain = job[placed], gpus[placed], gain[placed]
        spans = (kind[placed] == MoveKind.GROW).astype(np.intp)
        width = min(NODE_TRIES + int(layout.nodes[c_job].max(initial=0)), nodes)
        first = by_cost[spans[:, None], c_gpus[:, None] - 1, np.arange(width)]
        open_ = (
            ~np.isin(c_job[:, None] * nodes + first, pair_job * nodes + pair_node) & ~small[c_gpus[:, None] - 1, first]
        )
        other = open_ & (np.cumsum(open_, axis=1) <= NODE_TRIES)
        cand = [np.broadcast_to(placed[:, None], first.shape)[other]]
        node = [first[other]]
        estimate = [(c_gain[:, None] - cost[spans[:, None], c_gpus[:, None] - 1, first])[other]]
        # a ONE move may also stay on (or grow on) a node it uses: room there counts its own GPUs
        mine = np.flatnonzero((kind[placed] == MoveKind.ONE) & (layout.gpus[c_job] > 0))
        if mine.size:
            lo = np.searchsorted(pair_job, c_job[mine], "left")
            count = np.searchsorted(pair_job, c_job[mine], "right") - lo
            which = np.repeat(np.arange(mine.size), count)
            index = np.repeat(lo - np.cumsum(count) + count, count) + np.arange(count.sum())  # each one's pairs
            fits = size[pair_node[index]] >= c_gpus[mine][which]
            which, index = which[fits], index[fits]
            n = pair_node[index]
            wanted = np.clip(c_gpus[mine][which] - free[n] - pair_gpus[index], 0, gpn)
            cand.append(placed[mine][which])
            node.append(n)
            estimate.append(c_gain[mine][which] - evict[0, n, wanted])
        all_cand, all_node, all_estimate = (np.concatenate(x) for x in (cand, node, estimate))
        order = np.lexsort((all_node, -all_estimate, all_cand))
        all_cand, all_node, all_estimate = all_cand[order], all_node[order], all_estimate[order]
        starts = np.flatnonzero(np.r_[True, all_cand[1:] != all_cand[:-1]])
        rank = np.arange(all_cand.size) - np.repeat(starts, np.diff(np.r_[starts, all_cand.size]))
        keep = rank < NODE_TRIES
        return all_cand[keep], all_node[keep], all_estimate[keep], rank[keep]

    @np.errstate(invalid="ignore")  # -inf - -inf: a job holding more than its bound (the quota layer cut it), masked
    def _growers(self, layout: Layout) -> list[int]:
        """The running jobs that gain most per GPU from a few more GPUs across nodes, best first."""
        table, top, have = layout.values.table, layout.values.max_gpus, layout.gpus
        step = np.arange(1, layout.max_node_gpus + 1)
        more = np.minimum(have[:, None] + step, table.shape[2] - 1)
        jobs = np.arange(layout.num_jobs)
        valid = (have[:, None] > 0) & (more <= top[:, None])
        ratios = np.where(valid, (table[1][jobs[:, None], more] - layout.value[:, None]) / step, -np.inf)
        ratio = np.max(ratios, axis=1)
        good = np.flatnonzero(valid.any(axis=1) & (ratio > MIN_GAIN))
        return good[np.lexsort((good, -ratio[good]))][:MAX_GROWERS].tolist()

    def _eviction_costs(self, layout: Layout, pairs) -> np.ndarray:
        """evict[spans, node, x]: what making room for x GPUs on a node costs the jobs there, at least: the least
        one job loses giving them up (spans = 0, a mover on one node), or (spans = 1, a distributed mover, with
        interference avoidance) what the distributed job there loses leaving the node plus the least one other job
        loses giving up the rest. inf where no one job can."""
        values, gpn, nodes = layout.values, layout.max_node_gpus, layout.values.num_nodes
        pair_job, pair_node, pair_gpus = pairs
        single = np.full((2, nodes, gpn + 1), np.inf)  # [0]: any job; [1]: jobs on one node only
        single[:, :, 0] = 0.0
        leave = np.zeros((nodes, 2))  # (loss, GPUs) of the distributed job leaving each node
        distributed = layout.nodes[pair_job] > 1
        for x in range(1, gpn + 1):
            on = np.flatnonzero(pair_gpus >= x)
            if not on.size:
                break
            j, n, g = pair_job[on], pair_node[on], pair_gpus[on]
            count = layout.gpus[j] - x
            spans = ((layout.nodes[j] - (g == x)) > 1).astype(np.intp)
            value = values.table[spans, j, np.minimum(count, values.table.shape[2] - 1)]
            for i in np.flatnonzero((count == values.current_gpus[j]) & (count > 0)).tolist():
                row = dict(layout.rows[j[i]])
                row[int(n[i])] -= x
                value[i] = values.of(int(j[i]), {m: r for m, r in row.items() if r})
            loss = layout.value[j] - value
            np.fmin.at(single[0], (n, x), loss)
            alone = ~distributed[on]
            np.fmin.at(single[1], (n[alone], x), loss[alone])
            if self.avoid:
                gone = distributed[on] & (g == x)
                leave[n[gone]] = np.stack([loss[gone], g[gone]], axis=1)
        evict = single.copy()
        if self.avoid:
            rest = np.clip(np.arange(gpn + 1)[None, :] - leave[:, 1:2], 0, gpn).astype(int)
            evict[1] = leave[:, :1] + np.take_along_axis(single[1], rest, axis=1)
        return evict

    # -- one move --------------------------------------------------------------------------------------------
    def _apply(self, layout: Layout, mover: int, new: Row, extra: list[int]) -> None:
        """`mover` takes `new`: jobs in its way give way, then the free GPUs are shared out again (among the jobs
        that gave way and, when the mover freed GPUs, the jobs beside them and the `extra` ones)."""
        old = layout.rows[mover]
        occupants = {n: sorted(layout.on[n]) for n in {*old, *new}}  # before anything moves
        layout.set(mover, new)
        distributed = len(new) > 1
        losers: list[int] = []
        for n in sorted(new):
            others = [j for j in occupants[n] if j != mover]
            if self.avoid and distributed:  # a distributed job shares no node with another distributed job
                for j in others:
                    row = layout.rows[j]
                    if n in row and len(row) > 1:
                        layout.set(j, {m: g for m, g in row.items() if m != n})
                        losers.append(j)
            while layout.free[n] < 0:
                over = -int(layout.free[n])
                choices = []
                for j in others:
                    row = layout.rows[j]
                    if n in row:
                        shrunk = dict(row)
                        shrunk[n] -= min(over, row[n])
                        shrunk = {m: g for m, g in shrunk.items() if g}
                        choices.append((float(layout.value[j]) - layout.values.of(j, shrunk), j, shrunk))
                _, j, shrunk = min(choices, key=lambda c: (c[0], c[1]))
                layout.set(j, shrunk)
                losers.append(j)
        over_budget = self._within_budget(layout, mover)
        freed = [n for n in sorted(old) if old[n] > new.get(n, 0)]
        sharers = list(dict.fromkeys(losers + over_budget))
        if freed or over_budget:
            beside = {j for n in freed for j in occupants[n]}
            taken = set(sharers)
            for j in sorted(beside) + extra:
                if j != mover and j not in taken:
                    sharers.append(j)
                    taken.add(j)
        grow(layout, sharers, self.avoid)

    @staticmethod
    def _within_budget(layout: Layout, mover: int) -> list[int]:
        """Where `mover` took its tenant past its budget, the tenant's other jobs give GPUs up (the one losing least
        first, from its smallest node shares) until the tenant is within it; the jobs that gave way, in order.
        Losses by the value table for all of them at once; exactly (`ValueTable.of`) where the shape is not plain:
        a distributed job, or one shrinking to its current count (it may keep its allocation)."""
        values, budget = layout.values, layout.values.budget
        if budget is None:
            return []
        tenant = budget.tenant[mover]
        losers: list[int] = []
        while (over := int(layout.tenant_gpus[tenant] - budget.gpus[tenant])) > 0:
            mates = np.flatnonzero((budget.tenant == tenant) & (layout.gpus > 0))
            mates = mates[mates != mover]
            give = np.minimum(layout.gpus[mates], over)
            count = layout.gpus[mates] - give
            after = values.table[0, mates, count]
            exact = (layout.nodes[mates] > 1) | ((count == values.current_gpus[mates]) & (count > 0))
            for i in np.flatnonzero(exact).tolist():
                after[i] = values.of(int(mates[i]), _less(layout.rows[int(mates[i])], int(give[i])))
            i = int(np.lexsort((mates, layout.value[mates] - after))[0])
            j = int(mates[i])
            layout.set(j, _less(layout.rows[j], int(give[i])))
            losers.append(j)
        return losers


def _less(row: Row, gpus: int) -> Row:
    """`row` less `gpus` GPUs, from its smallest node shares first (so it spans as few nodes as it can)."""
    shrunk = dict(row)
    for node in sorted(row, key=lambda n: (row[n], n)):
        take = min(gpus, shrunk[node])
        shrunk[node] -= take
        gpus -= take
        if not shrunk[node]:
            del shrunk[node]
        if not gpus:
            break
    return shrunk
