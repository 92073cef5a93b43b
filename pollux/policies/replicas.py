"""Hybrid-parallel jobs under any policy: whole replicas, each replica's GPUs on one node (docs/design.md,
"Hybrid-parallel jobs").

A pipelined job (`JobView.pipelined`) is data parallel across replicas, and a replica is a pipeline of k GPUs of one
type (k per type: `JobView.gpus_per_replica`). An allocation of it is valid when each node holds a multiple of k of
its GPUs: then its replicas can be laid out k to a node, none split across nodes. Its goodput is a function of its
replicas R = K / k, not of its K GPUs: its throughput model, batch bounds and GPU bound are per replica.

What is here: the rule (`replica_problem`, and `check_whole_replicas`, which the engine runs every round); the refusal
of a policy that does not allocate whole replicas (`refuse_pipelines`); the goodput of a pipelined job by GPU count
from its goodput by replicas (`by_gpus`), and the value tables' mask that leaves it no count of part of a replica
(`only_whole_replicas`); and the repair that lays a search's allocation out as whole replicas on nodes
(`lay_out_replicas`), for a search (Pollux's) that places GPUs by count and shape, not by replica.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from pollux.cluster import Allocation, Cluster, free_gpus, num_nodes_used
from pollux.errors import AllocationError, SpecError
from pollux.policies.base import JobView, Policy


def replica_problem(job: JobView, allocation: Allocation, cluster: Cluster) -> str | None:
    """Why `allocation` is not whole replicas of `job` on one node each; None when it is (or holds no GPUs)."""
    if not any(allocation):
        return None
    gpu_type = cluster.allocation_type(allocation)
    if not job.may_run_on(str(gpu_type)):
        return f"it may not run on {gpu_type}"
    k = job.gpus_per_replica(gpu_type)
    split = [node for node, gpus in enumerate(allocation) if gpus % k]
    if split:
        return f"node {split[0]} holds {allocation[split[0]]} of its GPUs, not a multiple of its {k}-GPU replicas"
    return None


def check_whole_replicas(jobs: Sequence[JobView], allocations: Mapping[str, Allocation], cluster: Cluster) -> None:
    """Raise `AllocationError` unless every pipelined job's allocation is whole replicas, each on one node."""
    for job in jobs:
        if job.pipelined and job.name in allocations:
            problem = replica_problem(job, allocations[job.name], cluster)
            if problem is not None:
                raise AllocationError(f"job {job.name}: allocation {allocations[job.name]}: {problem}")


def refuse_pipelines(policy: type[Policy] | Policy, jobs: Sequence[JobView]) -> None:
    """A `SpecError` naming the first pipelined job, when `policy` does not allocate whole replicas."""
    if policy.whole_replicas:
        return
    for job in jobs:
        if job.pipelined:
            raise SpecError(refusal(policy.name, job.name, job.application, job.gpus_per_replica_by_type))


def refusal(policy: str, job: str, application: str, gpus_per_replica: Mapping[str, int]) -> str:
    """The one line a policy that cannot run a hybrid-parallel job answers with."""
    per_type = ", ".join(f"{k} GPUs on {t}" for t, k in sorted(gpus_per_replica.items()))
    return (
        f"job {job}: application {application!r} is hybrid-parallel (a replica is a pipeline of {per_type}); "
        f"policy {policy!r} does not allocate whole replicas: run it with -p pollux"
    )


def by_gpus(by_replicas: np.ndarray, gpus_per_replica: int, max_gpus: int) -> np.ndarray:
    """A goodput table by GPU count, K = 0…max_gpus, from one by replicas (R = 0…): R·k GPUs are worth R replicas,
    any other count nothing (it is not an allocation the job can run)."""
    out = np.zeros((*by_replicas.shape[:-1], max_gpus + 1))
    replicas = np.arange(0, max_gpus // gpus_per_replica + 1)
    out[..., replicas * gpus_per_replica] = by_replicas[..., replicas]
    return out


def only_whole_replicas(values: np.ndarray, gpus_per_replica: int) -> np.ndarray:
    """Value rows (…, K = 0…) with every count that is not whole replicas forbidden (-inf), so that no search step
    gives the job part of a replica; K = 0 (waiting) stays as it is."""
    if gpus_per_replica == 1:
        return values
    counts = np.arange(values.shape[-1])
    values = values.copy()
    values[..., (counts % gpus_per_replica != 0)] = -np.inf
    return values


def lay_out_replicas(
    jobs: Sequence[JobView], allocations: Mapping[str, Allocation], cluster: Cluster, avoid_sharing: bool
) -> dict[str, Allocation]:
    """`allocations` with every pipelined job's laid out as whole replicas, each on one node. A valid one is kept;
    else the job keeps as many of its replicas as the free GPUs of its type hold k to a node, on the nodes it was
    given first (most of its GPUs there first), then the freest; across nodes, with `avoid_sharing`, only on nodes
    no other distributed job holds (or on one node, where that holds more). GPUs it leaves stay free this round."""
    placed = dict(allocations)
    for job in jobs:
        alloc = placed.get(job.name)
        if not job.pipelined or alloc is None or replica_problem(job, alloc, cluster) is None:
            continue
        del placed[job.name]
        gpu_type = str(cluster.allocation_type(alloc))
        k = job.gpus_per_replica(gpu_type)
        free = free_gpus(cluster, placed)
        order = sorted(cluster.nodes_of_type(gpu_type), key=lambda n: (-alloc[n], -free[n], n))
        row = _fill(order, free, k, sum(alloc) // k, cluster.num_nodes)
        if avoid_sharing and num_nodes_used(row) > 1:
            held = np.zeros(cluster.num_nodes, dtype=bool)
            for other in placed.values():
                if num_nodes_used(other) > 1:
                    held |= np.asarray(other) > 0
            if any(held[n] for n, g in enumerate(row) if g):
                spread = _fill([n for n in order if not held[n]], free, k, sum(alloc) // k, cluster.num_nodes)
                home = max(order, key=lambda n: (free[n] // k, alloc[n], -n))
                single = _fill([home], free, k, sum(alloc) // k, cluster.num_nodes)
                row = spread if sum(spread) >= sum(single) else single
        if any(row):
            placed[job.name] = row
    return placed


def _fill(nodes: Sequence[int], free: Sequence[int], k: int, replicas: int, num_nodes: int) -> Allocation:
    """Up to `replicas` replicas of k GPUs on `nodes`, in that order, as many to a node as its free GPUs hold."""
    row = [0] * num_nodes
    for node in nodes:
        if replicas <= 0:
            break
        take = min(free[node] // k, replicas)
        row[node], replicas = take * k, replicas - take
    return tuple(row)
