"""The Pollux policy on a cluster of several GPU types (docs/design.md, "Heterogeneous clusters").

A job runs on one type at a time. The search first chooses every job's type and GPU count, then runs the one-type
search (`PolluxPolicy`'s placement, fill, local search and polish) on each type's nodes with the jobs given that
type. On a one-type cluster this is exactly the one-type search.

**Values.** A job's value on K GPUs of type t is its power-mean term of goodput_t(K) / base_j (restart factor
applied where its allocation changes). goodput_t is the model fitted on t where the job has run there; else the
model of a type it has run on, scaled by the ratio of the two types' 1-GPU throughputs (`scaled_params`, Sia's
bootstrap); else, before it has run anywhere, linear in K at its 1-GPU throughput on t. base_j is the job's
goodput on a fair share ⌈G/J⌉ of one node, averaged over the types weighted by their GPUs: on one type, the
artifact's normalization; on several, what an equal slice of the whole cluster is worth to the job.

**Types and counts.** The one-type search's count greedy (`search_state.greedy_counts`) over every (job, type)'s
values, with a GPU budget per type (a job's type is settled by its first GPUs), and a mixed-integer program over
the same values (`counts_by_program`, which usually does better); the round keeps whichever is worth more. Keeping
the current allocation is worth its undiscounted value on the current type only, so a job changes type only when
the gain outweighs the restart. A job left without GPUs joins the type where one GPU is worth most to it, so that
type's fill and polish may still give it GPUs.

**Tenants.** Under the tenants' budgets (`PolluxPolicy.optimize_within`) each type's value table carries that type's
`TenantBudget`: the count greedy and the program (one row per tenant and type) keep every tenant within its budget
on every type, and so does each type's search; a waiting job joins a type where its tenant has GPUs left, if any.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from pollux.cluster import Allocation, Cluster
from pollux.goodput import ThroughputParams, scaled_params
from pollux.policies.base import JobView
from pollux.policies.replicas import only_whole_replicas
from pollux.policies.search_state import Layout, Row, ValueTable, greedy_counts, sparse_row, tenant_budget
from pollux.policies.speedup import GoodputTables, fair_share_base

# HiGHS's limit per solve, wall-clock: a guard against a pathological program, not a budget. The relaxation of a
# round of 433 jobs on 2,048 GPUs takes 0.3-0.5 s of CPU, and a 1-s limit, hit on a busy machine, had a round fall
# back to the count greedy's choice (about 1% less value): a simulation's result then depended on the machine's load.
PROGRAM_TIME_LIMIT_S = 10.0


class OneTypeSearch(Protocol):
    """What the typed search asks of the one-type policy (`PolluxPolicy`, which calls it): its values, the goodput
    tables it keeps from round to round, and its search on one type's nodes. A protocol, so that this module imports
    no policy."""

    goodput_tables: GoodputTables

    def utility(self, scaled_speedup: np.ndarray | float) -> np.ndarray: ...

    def remaining_terms(
        self, jobs: Sequence[JobView], cluster: Cluster, base_goodputs: Sequence[float]
    ) -> tuple[np.ndarray, list[float | None]]: ...

    def change_factor(
        self, job: JobView, now: float, speedups: np.ndarray, remaining_s: float | None
    ) -> np.ndarray | float: ...

    def job_values(
        self, job: JobView, speedups: np.ndarray, factor: np.ndarray | float, row: Row, weight: float = 1.0
    ) -> tuple[np.ndarray, float]: ...

    def search(self, values: ValueTable, counts: np.ndarray, round_jobs: int | None = None) -> Layout: ...


@dataclass(frozen=True)
class TypeSlice:
    """One GPU type's part of the cluster: its nodes as a cluster of their own, and their indices in the whole."""

    gpu_type: str
    cluster: Cluster
    nodes: tuple[int, ...]

    def restrict(self, allocation: Allocation) -> Allocation:
        nodes = self.nodes
        if nodes and nodes[-1] - nodes[0] + 1 == len(nodes):  # one run of nodes: a slice, not a walk per node
            return allocation[nodes[0] : nodes[-1] + 1]
        return tuple(allocation[n] for n in nodes)

    def expand(self, allocation: Allocation, num_nodes: int) -> Allocation:
        whole = [0] * num_nodes
        for node, gpus in zip(self.nodes, allocation, strict=True):
            whole[node] = gpus
        return tuple(whole)


def type_slices(cluster: Cluster) -> list[TypeSlice]:
    return [
        TypeSlice(t, Cluster.of_groups([g for g in cluster.groups if g.gpu_type == t]), cluster.nodes_of_type(t))
        for t in cluster.gpu_types
    ]


def model_on(
    job: JobView, gpu_type: str, scaled: dict[tuple[ThroughputParams, float], ThroughputParams] | None = None
) -> ThroughputParams | None:
    """The job's throughput model on `gpu_type`: fitted there, else bootstrapped from the type it knows best (its
    current one, else the one it ran on longest) by the 1-GPU throughput ratio (1 when a ratio is unknown), else
    its one model (a type-unaware job, or a one-type cluster), else None (never ran). `scaled`: the bootstrapped
    models of a round so far, by (model, ratio), to build each once."""
    fitted = job.throughput_params_by_type
    if gpu_type in fitted:
        return fitted[gpu_type]
    if not fitted:
        return job.throughput_params
    source = max(fitted, key=lambda t: (job.run_time_by_type_s.get(t, 0.0), t))
    speeds = job.single_gpu_throughput_by_type
    ratio = speeds[gpu_type] / speeds[source] if speeds.get(gpu_type, 0) > 0 and speeds.get(source, 0) > 0 else 1.0
    if scaled is None:
        return scaled_params(fitted[source], ratio)
    key = (fitted[source], ratio)
    if key not in scaled:
        scaled[key] = scaled_params(*key)
    return scaled[key]


@dataclass(frozen=True)
class _OnType:
    """A job as the one-type search sees it on one type's nodes: its allocation there, its GPU bound there, and its
    goodput table there."""

    allocation: Allocation
    max_gpus: int
    goodput: np.ndarray


def typed_value_tables(
    policy: OneTypeSearch,
    jobs: Sequence[JobView],
    cluster: Cluster,
    pieces: Sequence[TypeSlice],
    now: float,
    budgets: Mapping[str, Mapping[str, int]] | None = None,
) -> list[ValueTable]:
    """One value table per type over every job (a job that may not run on a type can hold 0 GPUs there), each with
    the tenants' budgets on its type where there are `budgets`. Jobs alike share their goodput tables (the policy's
    `GoodputTables`, which keeps those the next round asks for again) and bootstrapped models (`model_on`)."""
    fair = max(1, math.ceil(cluster.num_gpus / len(jobs)))
    one_node = max(cluster.max_gpus_per_node, fair)  # the most of one node any step reads (the fair share's base)
    scale = cluster.num_nodes / cluster.num_gpus
    weights = [piece.cluster.num_gpus / cluster.num_gpus for piece in pieces]
    per_type: list[list[_OnType | None]] = []
    goodput_tables = policy.goodput_tables
    goodput_tables.new_round()
    scaled: dict[tuple[ThroughputParams, float], ThroughputParams] = {}
    for piece in pieces:
        column: list[_OnType | None] = []
        for job in jobs:
            if not job.may_run_on(piece.gpu_type):
                column.append(None)
                continue
            params = model_on(job, piece.gpu_type, scaled)
            top = min(job.max_gpus_on(piece.gpu_type), piece.cluster.num_gpus)
            k = job.gpus_per_replica(piece.gpu_type)
            goodput = goodput_tables(job, max(top, fair), params, job.bounds_on(piece.gpu_type), k, one_node)
            if params is None:  # never ran: linear at its 1-GPU speed there, where known
                goodput = goodput * job.single_gpu_throughput_by_type.get(piece.gpu_type, 1.0)
            column.append(_OnType(piece.restrict(job.allocation), top, goodput))
        per_type.append(column)
    bases = []  # per job: its fair-share goodput averaged over the types it may use, weighted by their GPUs
    for j in range(len(jobs)):
        usable = [(w, column[j]) for w, column in zip(weights, per_type, strict=True) if column[j] is not None]
        total = sum(w for w, _ in usable)
        bases.append(
            sum(w * fair_share_base(entry.goodput, fair) for w, entry in usable if entry) / total if total else 1.0
        )
    job_weights, remaining = policy.remaining_terms(jobs, cluster, bases)
    tables = []
    for piece, column in zip(pieces, per_type, strict=True):
        rows: list[np.ndarray] = []
        keep: list[float] = []
        current: list[Row] = []
        for j, (job, entry) in enumerate(zip(jobs, column, strict=True)):
            if entry is None:
                rows.append(policy.utility(np.zeros((2, 1))))
                keep.append(-np.inf)
                current.append({})
                continue
            row = sparse_row(entry.allocation)
            speedups = scale * entry.goodput[:, : entry.max_gpus + 1] / bases[j]
            factor = policy.change_factor(job, now, speedups / scale, remaining[j])
            values, kept = policy.job_values(job, speedups, factor, row, float(job_weights[j]))
            rows.append(only_whole_replicas(values, job.gpus_per_replica(piece.gpu_type)))
            keep.append(kept)
            current.append(row)
        allocations = [
            piece.restrict(job.allocation) if entry is None else entry.allocation
            for job, entry in zip(jobs, column, strict=True)
        ]
        budget = None if budgets is None else tenant_budget(jobs, budgets, piece.gpu_type, piece.cluster.num_gpus)
        tables.append(ValueTable(rows, keep, current, allocations, piece.cluster, budget))
    return tables


def sub_table(values: ValueTable, jobs: Sequence[int], cluster: Cluster) -> ValueTable:
    """The rows of `jobs` only (the jobs a type's search places), under the same tenants' budgets."""
    width = [int(values.max_gpus[j]) + 1 for j in jobs]
    return ValueTable(
        [values.table[:, j, :w] for j, w in zip(jobs, width, strict=True)],
        [float(values.keep[j]) for j in jobs],
        [values.current[j] for j in jobs],
        [values.allocations[j] for j in jobs],
        cluster,
        None if values.budget is None else values.budget.of(jobs),
    )


def envelope_vertices(values: np.ndarray | Sequence[float]) -> list[int]:
    """Counts K > 0 on the upper concave envelope of (K, values[K]) from K = 0: the counts worth stopping at when
    GPUs are scarce (a count below the envelope is beaten by a mix of its neighbours). On Python floats (the same
    IEEE arithmetic as numpy's, without a numpy scalar per step)."""
    # strictly concave (the usual goodput row): the walk below would pop nothing, so every count is a vertex; the
    # same comparison as its first pop test, for every three neighbours at once
    if (
        isinstance(values, np.ndarray)
        and values.size > 2
        and np.isfinite(values).all()
        and not np.any((values[1:-1] - values[:-2]) * 2 <= values[2:] - values[:-2])
    ):
        return list(range(1, values.size))
    if isinstance(values, np.ndarray):
        values = values.tolist()
    hull: list[int] = [0]
    for k in range(1, len(values)):
        if not math.isfinite(values[k]):
            continue
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            if (values[b] - values[a]) * (k - a) <= (values[k] - values[a]) * (b - a):
                hull.pop()
            else:
                break
        hull.append(k)
    return hull[1:]


def counts_by_program(
    tables: Sequence[ValueTable], pieces: Sequence[TypeSlice], time_limit_s: float = PROGRAM_TIME_LIMIT_S
) -> tuple[np.ndarray, np.ndarray] | None:
    """(type index, GPUs) per job maximizing the sum of the jobs' values under every type's GPUs: a multiple-choice
    knapsack, solved as a mixed-integer program (HiGHS), as Sia solves its own. Each (job, type) offers the counts
    on the upper concave envelope of its values and its current count (where it keeps its allocation); under the
    tenants' budgets, one more row per tenant and type that its budget can bind. None when HiGHS returns no solution
    within `time_limit_s`; -1 where a job gets nothing."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_array, vstack

    num_jobs = tables[0].num_jobs
    job_of, type_of, count_of, gain_of = [], [], [], []
    envelopes: dict[bytes, list[int]] = {}  # jobs alike have the same row: its envelope once
    for t, values in enumerate(tables):
        capacity = pieces[t].cluster.num_gpus
        tops = np.minimum(values.max_gpus, capacity)
        for j in np.flatnonzero(tops >= 1).tolist():
            planned = values.planned[j, : tops[j] + 1]
            current = int(values.current_gpus[j])
            key = planned.tobytes()
            if key not in envelopes:
                envelopes[key] = envelope_vertices(planned)
            row = planned.tolist()
            candidates = set(envelopes[key])
            if 0 < current < len(row):
                candidates.add(current)
            for k in sorted(candidates):
                gain = row[k] - row[0]
                if math.isfinite(gain) and gain > 0:
                    job_of.append(j)
                    type_of.append(t)
                    count_of.append(k)
                    gain_of.append(gain)
    kind = np.full(num_jobs, -1, dtype=np.int64)
    counts = np.zeros(num_jobs, dtype=np.int64)
    if not gain_of:
        return kind, counts
    columns = np.arange(len(gain_of))
    one_each = csr_array((np.ones(len(columns)), (job_of, columns)), shape=(num_jobs, len(columns)))
    per_type = csr_array((np.array(count_of, dtype=np.float64), (type_of, columns)), shape=(len(tables), len(columns)))
    capacities = np.array([piece.cluster.num_gpus for piece in pieces], dtype=np.float64)
    quota_rows, quotas = tenant_rows(tables, np.array(job_of), np.array(type_of), np.array(count_of))
    if quotas.size:  # the tenants' budgets: more rows of the same kind as the capacities
        per_type = csr_array(vstack([per_type, csr_array(quota_rows)]))
        capacities = np.concatenate([capacities, quotas])
    gains = np.array(gain_of) / max(gain_of)
    jobs_of, counts_of, types_of = np.array(job_of), np.array(count_of), np.array(type_of)

    def solve(cols: np.ndarray, room: np.ndarray, integral: bool) -> np.ndarray | None:
        """x over `cols` maximizing their gains within `room` GPUs per type (one choice per job)."""
        solution = milp(
            -gains[cols],
            integrality=np.full(cols.size, 1 if integral else 0),
            bounds=Bounds(0, 1),
            constraints=[
                LinearConstraint(one_each[:, cols], 0, 1),
                LinearConstraint(per_type[:, cols], 0, room),
            ],
            options={"time_limit": time_limit_s, "mip_rel_gap": 1e-6},
        )
        return solution.x

    # The relaxation first: at most a few jobs (about one per capacity row) come out split between choices; the
    # others take their choice as it is, and a small integer program settles the split ones in the GPUs left.
    relaxed = solve(columns, capacities, integral=False)
    if relaxed is None:
        return None
    whole = relaxed > 1 - 1e-7
    split_jobs = np.setdiff1d(np.unique(jobs_of[relaxed > 1e-7]), jobs_of[whole])
    chosen = columns[whole]
    if split_jobs.size:
        used = np.bincount(types_of[chosen], weights=counts_of[chosen], minlength=len(tables))
        if quotas.size:
            used = np.concatenate([used, quota_rows[:, chosen].sum(axis=1)])
        rest = columns[np.isin(jobs_of, split_jobs)]
        settled = solve(rest, capacities - used, integral=True)
        if settled is None:
            return None
        chosen = np.concatenate([chosen, rest[settled > 0.5]])
    for c in chosen.tolist():
        kind[job_of[c]], counts[job_of[c]] = type_of[c], count_of[c]
    return kind, counts


def tenant_rows(
    tables: Sequence[ValueTable], job_of: np.ndarray, type_of: np.ndarray, count_of: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The program's rows for the tenants' budgets: (GPUs each choice takes from the row's tenant and type, the
    budget) for each tenant and type whose budget can bind, that is, below both the type's GPUs and the most its
    jobs could take there together (each its largest choice). No rows where the tables carry no budgets."""
    rows, bounds = [], []
    for t, values in enumerate(tables):
        budget = values.budget
        if budget is None:
            continue
        on_type = type_of == t
        most = np.zeros(values.num_jobs)
        np.maximum.at(most, job_of[on_type], count_of[on_type])
        wanted = np.bincount(budget.tenant, weights=most, minlength=budget.gpus.size)
        for tenant in np.flatnonzero((budget.gpus < values.num_gpus) & (wanted > budget.gpus)).tolist():
            rows.append(np.where(on_type & (budget.tenant[job_of] == tenant), count_of, 0.0))
            bounds.append(float(budget.gpus[tenant]))
    return np.array(rows, dtype=np.float64).reshape(len(rows), job_of.size), np.array(bounds, dtype=np.float64)


def choice_value(tables: Sequence[ValueTable], kind: np.ndarray, counts: np.ndarray) -> float:
    """What types and counts per job are worth by the value tables: the sum over jobs given GPUs of their gain over
    holding none (keeping the current allocation where the count is the current one)."""
    total = 0.0
    for j in np.flatnonzero((kind >= 0) & (counts > 0)).tolist():
        values = tables[int(kind[j])]
        total += values.by_count(j, int(counts[j])) - values.by_count(j, 0)
    return total


def quota_left(tables: Sequence[ValueTable], kind: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """left[t, j]: whether job j's tenant has GPUs of type t left once every job holds its chosen type and count
    (everywhere, without budgets)."""
    left = np.ones((len(tables), kind.size), dtype=bool)
    for t, values in enumerate(tables):
        budget = values.budget
        if budget is not None:
            left[t] = (budget.gpus - budget.held(np.where(kind == t, counts, 0)))[budget.tenant] > 0
    return left


def optimize_typed(
    policy: OneTypeSearch,
    jobs: Sequence[JobView],
    cluster: Cluster,
    now: float,
    budgets: Mapping[str, Mapping[str, int]] | None = None,
) -> tuple[dict[str, Allocation], list[float]]:
    """Allocations on every type (module docstring) and every job's value, in job order; with `budgets`, every
    tenant's GPUs of each type within `budgets[tenant][type]`."""
    pieces = type_slices(cluster)
    tables = typed_value_tables(policy, jobs, cluster, pieces, now, budgets)
    greedy = greedy_counts(tables, jobs)
    chosen = counts_by_program(tables, pieces)
    kind, counts = greedy if chosen is None or choice_value(tables, *greedy) > choice_value(tables, *chosen) else chosen
    left = quota_left(tables, kind, counts)
    for j in np.flatnonzero(kind < 0).tolist():  # waiting: where its tenant has GPUs left, one replica is worth most
        unit = [jobs[j].gpus_per_replica(piece.gpu_type) for piece in pieces]
        kind[j] = max(range(len(tables)), key=lambda t: (bool(left[t, j]), float(tables[t].natural[j, unit[t]]), -t))
    placed: dict[str, Allocation] = {}
    value = np.zeros(len(jobs))
    for t, piece in enumerate(pieces):
        members = np.flatnonzero(kind == t).tolist()
        if not members:
            continue
        values = sub_table(tables[t], members, piece.cluster)
        layout = policy.search(values, counts[members], round_jobs=len(jobs))
        for k, j in enumerate(members):
            value[j] = layout.value[k]
            if layout.gpus[k] > 0:
                placed[jobs[j].name] = piece.expand(layout.allocation(k), cluster.num_nodes)
    return placed, value.tolist()
