"""Nodes, GPUs, GPU types and allocations: pure data and the placement rules every policy must keep.

A cluster is a list of node groups, each of one GPU type with a number of nodes of the same size; nodes are
numbered group after group (docs/design.md, "Heterogeneous clusters"). A uniform cluster (`Cluster(16, 4)`, the
Pollux artifact's 16 × 4 T4) is one group.

An allocation is a tuple with one entry per node: the GPUs a job holds on that node (Pollux §4.2's matrix A, row
j). A job's *placement* is its allocation with zeros dropped: what determines its step time, together with the
one GPU type of the nodes it holds (a job never spans two types).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pollux.errors import AllocationError, SpecError

Allocation = tuple[int, ...]

# NVIDIA T4 nodes of 4 GPUs: the Pollux artifact's cluster, and Sia's name (`aws`) for the profiles measured there.
DEFAULT_GPU_TYPE = "aws"


@dataclass(frozen=True)
class NodeGroup:
    """`num_nodes` nodes of `gpus_per_node` GPUs of type `gpu_type` each."""

    gpu_type: str
    num_nodes: int
    gpus_per_node: int

    def __post_init__(self) -> None:
        if not self.gpu_type or not isinstance(self.gpu_type, str):
            raise SpecError(f"cluster gpu_type must be a non-empty name, got {self.gpu_type!r}")
        if self.num_nodes < 1:
            raise SpecError(f"cluster group {self.gpu_type!r}: num_nodes must be >= 1, got {self.num_nodes}")
        if self.gpus_per_node < 1:
            raise SpecError(f"cluster group {self.gpu_type!r}: gpus_per_node must be >= 1, got {self.gpus_per_node}")


@dataclass(frozen=True, init=False)
class Cluster:
    """Node groups in order; `Cluster(num_nodes, gpus_per_node, gpu_type)` is the one-group shorthand."""

    groups: tuple[NodeGroup, ...]

    def __init__(
        self,
        num_nodes: int = 16,
        gpus_per_node: int = 4,
        gpu_type: str = DEFAULT_GPU_TYPE,
        *,
        groups: Sequence[NodeGroup] | None = None,
    ) -> None:
        if groups is None:
            if num_nodes < 1:
                raise SpecError(f"cluster num_nodes must be >= 1, got {num_nodes}")
            if gpus_per_node < 1:
                raise SpecError(f"cluster gpus_per_node must be >= 1, got {gpus_per_node}")
            groups = (NodeGroup(gpu_type, num_nodes, gpus_per_node),)
        if not groups:
            raise SpecError("a cluster needs at least one node group")
        object.__setattr__(self, "groups", tuple(groups))

    @classmethod
    def of_groups(cls, groups: Sequence[NodeGroup]) -> Cluster:
        return cls(groups=groups)

    def scaled(self, factor: int) -> Cluster:
        """The same groups, each with `factor` times its nodes (a larger cluster of the same mix)."""
        if factor < 1:
            raise SpecError(f"a cluster scales by a whole factor >= 1, got {factor}")
        return Cluster.of_groups([NodeGroup(g.gpu_type, g.num_nodes * factor, g.gpus_per_node) for g in self.groups])

    # -- per node ------------------------------------------------------------------------------------------------
    @functools.cached_property
    def node_gpus(self) -> tuple[int, ...]:
        """GPUs of each node, in node order."""
        return tuple(g.gpus_per_node for g in self.groups for _ in range(g.num_nodes))

    @functools.cached_property
    def node_types(self) -> tuple[str, ...]:
        """GPU type of each node, in node order."""
        return tuple(g.gpu_type for g in self.groups for _ in range(g.num_nodes))

    @property
    def num_nodes(self) -> int:
        return len(self.node_gpus)

    @property
    def num_gpus(self) -> int:
        return sum(self.node_gpus)

    @property
    def max_gpus_per_node(self) -> int:
        return max(self.node_gpus)

    @property
    def uniform(self) -> bool:
        """Every node of one size (whatever their types)."""
        return len(set(self.node_gpus)) == 1

    @property
    def gpus_per_node(self) -> int:
        """GPUs of every node, for uniform clusters only: code that must handle nodes of different sizes reads
        `node_gpus` instead, so a non-uniform cluster fails here loudly rather than being treated as uniform."""
        if not self.uniform:
            raise ValueError(f"cluster {self.describe()} has nodes of different sizes: read Cluster.node_gpus")
        return self.node_gpus[0]

    # -- per type ------------------------------------------------------------------------------------------------
    @functools.cached_property
    def gpu_types(self) -> tuple[str, ...]:
        """The GPU types present, in the order their first group is listed."""
        return tuple(dict.fromkeys(g.gpu_type for g in self.groups))

    @property
    def heterogeneous(self) -> bool:
        return len(self.gpu_types) > 1

    def nodes_of_type(self, gpu_type: str) -> tuple[int, ...]:
        return tuple(n for n, t in enumerate(self.node_types) if t == gpu_type)

    def gpus_of_type(self, gpu_type: str) -> int:
        return sum(g.num_nodes * g.gpus_per_node for g in self.groups if g.gpu_type == gpu_type)

    def allocation_type(self, allocation: Allocation) -> str | None:
        """The one GPU type an allocation holds, None when it holds no GPUs; `AllocationError` when it mixes
        types (no job spans two types)."""
        types = {self.node_types[n] for n, g in enumerate(allocation) if g > 0}
        if len(types) > 1:
            raise AllocationError(f"allocation {allocation} spans GPU types {sorted(types)}; a job holds one type")
        return next(iter(types), None)

    # -- misc ----------------------------------------------------------------------------------------------------
    def empty(self) -> Allocation:
        return (0,) * self.num_nodes

    def describe(self) -> str:
        """E.g. `6×4 aws + 3×8 rtx + 2×8 dgx-ext` (64 GPUs)."""
        return " + ".join(f"{g.num_nodes}×{g.gpus_per_node} {g.gpu_type}" for g in self.groups)

    def __repr__(self) -> str:
        return f"Cluster({self.describe()})"


def placement(allocation: Allocation) -> tuple[int, ...]:
    """GPUs per node used, zeros dropped, in node order."""
    return tuple(g for g in allocation if g > 0)


def num_gpus(allocation: Allocation) -> int:
    return sum(allocation)


def num_nodes_used(allocation: Allocation) -> int:
    return sum(1 for g in allocation if g > 0)


def free_gpus(cluster: Cluster, allocations: Mapping[str, Allocation]) -> list[int]:
    """GPUs left on each node after `allocations`."""
    free = list(cluster.node_gpus)
    for alloc in allocations.values():
        for node, gpus in enumerate(alloc):
            free[node] -= gpus
    return free


def validate_allocations(cluster: Cluster, allocations: Mapping[str, Allocation], avoid_sharing: bool = False) -> None:
    """Raise `AllocationError` unless every node's GPUs suffice, every job holds GPUs of one type only (and, with
    `avoid_sharing`, no node hosts two distributed jobs: the interference avoidance of Pollux §4.2)."""
    for job, alloc in allocations.items():
        if len(alloc) != cluster.num_nodes or any(g < 0 for g in alloc):
            raise AllocationError(
                f"job {job}: allocation {alloc} must list >= 0 GPUs for each of the {cluster.num_nodes} nodes"
            )
        if cluster.heterogeneous:
            try:
                cluster.allocation_type(alloc)
            except AllocationError as error:
                raise AllocationError(f"job {job}: {error}") from None
    for node, free in enumerate(free_gpus(cluster, allocations)):
        if free < 0:
            capacity = cluster.node_gpus[node]
            raise AllocationError(f"node {node}: allocations use {capacity - free} GPUs, it has {capacity}")
    if avoid_sharing:
        for node in range(cluster.num_nodes):
            distributed = [j for j, a in allocations.items() if a[node] > 0 and num_nodes_used(a) > 1]
            if len(distributed) > 1:
                raise AllocationError(f"node {node}: distributed jobs {distributed} share it")
