"""Nodes, GPUs and allocations: pure data and the placement rules every policy must keep.

An allocation is a tuple with one entry per node: the GPUs a job holds on that node (Pollux §4.2's matrix A, row
j). A job's *placement* is its allocation with zeros dropped: what determines its step time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pollux.errors import AllocationError, SpecError

Allocation = tuple[int, ...]


@dataclass(frozen=True)
class Cluster:
    """A homogeneous cluster of `num_nodes` nodes with `gpus_per_node` GPUs each."""

    num_nodes: int = 16
    gpus_per_node: int = 4

    def __post_init__(self) -> None:
        if self.num_nodes < 1:
            raise SpecError(f"cluster num_nodes must be >= 1, got {self.num_nodes}")
        if self.gpus_per_node < 1:
            raise SpecError(f"cluster gpus_per_node must be >= 1, got {self.gpus_per_node}")

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    def empty(self) -> Allocation:
        return (0,) * self.num_nodes


def placement(allocation: Allocation) -> tuple[int, ...]:
    """GPUs per node used, zeros dropped, in node order."""
    return tuple(g for g in allocation if g > 0)


def num_gpus(allocation: Allocation) -> int:
    return sum(allocation)


def num_nodes_used(allocation: Allocation) -> int:
    return sum(1 for g in allocation if g > 0)


def free_gpus(cluster: Cluster, allocations: Mapping[str, Allocation]) -> list[int]:
    """GPUs left on each node after `allocations`."""
    free = [cluster.gpus_per_node] * cluster.num_nodes
    for alloc in allocations.values():
        for node, gpus in enumerate(alloc):
            free[node] -= gpus
    return free


def validate_allocations(cluster: Cluster, allocations: Mapping[str, Allocation], avoid_sharing: bool = False) -> None:
    """Raise `AllocationError` unless every node's GPUs suffice (and, with `avoid_sharing`, no node hosts two
    distributed jobs: the interference avoidance of Pollux §4.2)."""
    for job, alloc in allocations.items():
        if len(alloc) != cluster.num_nodes or any(g < 0 for g in alloc):
            raise AllocationError(
                f"job {job}: allocation {alloc} must list >= 0 GPUs for each of the {cluster.num_nodes} nodes"
            )
    for node, free in enumerate(free_gpus(cluster, allocations)):
        if free < 0:
            raise AllocationError(
                f"node {node}: allocations use {cluster.gpus_per_node - free} GPUs, it has {cluster.gpus_per_node}"
            )
    if avoid_sharing:
        for node in range(cluster.num_nodes):
            distributed = [j for j, a in allocations.items() if a[node] > 0 and num_nodes_used(a) > 1]
            if len(distributed) > 1:
                raise AllocationError(f"node {node}: distributed jobs {distributed} share it")
