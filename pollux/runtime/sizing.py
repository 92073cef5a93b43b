"""The runtime's sizing for cloud auto-scaling (Pollux §5.4): how many nodes of each GPU type the policy wants.

Why: Pollux knows what each job would gain from more GPUs, so the cluster can grow while that gain is worth its
nodes and shrink when it is not. The question is asked of the scheduling policy itself, on the largest cluster the
autoscaler may build: whatever its allocation uses is what the jobs would profit from, and a node it leaves empty is
not worth paying for. Pure (no I/O, no clock): job views and a cluster in, nodes per type out. The simulator's
autoscaling (issue 18, item 3) answers the same question; the two are meant to be one function once both exist.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pollux.cluster import Cluster
from pollux.policies.base import JobView, Policy


def wanted_nodes(
    policy: Policy,
    jobs: Sequence[JobView],
    largest: Cluster,
    now: float,
    minimum: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """Nodes per GPU type of `largest` that `policy`'s allocation of `jobs` uses there, within [minimum, the
    type's nodes in `largest`]. The jobs' allocations must be given on `largest` (empty ones: a fresh look)."""
    used = {gpu_type: 0 for gpu_type in largest.gpu_types}
    if jobs:
        result = policy.optimize(jobs, largest, now)
        nodes = {n for allocation in result.allocations.values() for n, gpus in enumerate(allocation) if gpus > 0}
        for n in nodes:
            used[largest.node_types[n]] += 1
    floor = minimum or {}
    return {t: min(max(count, floor.get(t, 0)), len(largest.nodes_of_type(t))) for t, count in used.items()}
