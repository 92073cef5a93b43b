"""The Ray launcher's node pool: which Ray nodes offer GPUs, of what type, numbered how, and which are left out.

* Each node's GPU type comes from Ray: a resource named in `gpu_type_resources` (`--gpu-type-resource
  RESOURCE=TYPE`), else the node's `ray.io/accelerator-type` label, else its `accelerator_type:<NAME>` resource (Ray
  sets both on nodes with GPUs it recognises), in the short names of `pollux.runtime.gpu_types`; else "gpu". The
  pool is one node group per (type, GPUs per node), nodes of a group in node-id order.
* The pool may change (cloud auto-scaling: `NodePool.refresh`): nodes that joined are added, nodes that left or
  that the scheduler releases are dropped, and `refresh` tells the old index of each node kept, so that the service
  can renumber what runs and stop (checkpoint) what ran on a node no longer in the pool.
* A node that failed a reservation (and where no group of ours holds GPUs: then it is merely busy) is left out of
  the pool, and refused, for `QUARANTINE_S` or until Ray declares it dead, unless a group of ours runs on it.
* Ray's list of alive nodes is read at most every `ALIVE_TTL_S` (each poll of each running job asks for it), or
  at once where a stale answer would cost a wrong decision (a launch, a reservation, a crashed group's verdict).

Ray is imported lazily, so that this module (and the pool's logic, given a node list) works without it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pollux.cluster import Allocation, Cluster, NodeGroup
from pollux.errors import LaunchError
from pollux.runtime.gpu_types import UNKNOWN_GPU_TYPE, type_from_device_name

LOG = logging.getLogger(__name__)

ACCELERATOR_LABEL = "ray.io/accelerator-type"  # the label Ray gives a node whose GPU model it recognises
ACCELERATOR_RESOURCE_PREFIX = "accelerator_type:"  # Ray's resource naming a node's GPU model (1 per node)
ALIVE_TTL_S = 1.0  # how long Ray's list of alive nodes is reused (each poll of each running job reads it)
QUARANTINE_S = 60.0  # a node that failed a reservation is left out this long, unless Ray declares it dead sooner

NodeList = Callable[[], Sequence[Mapping[str, Any]]]  # Ray's node table, as `ray.nodes()` returns it


@dataclass(frozen=True)
class RayNode:
    """One Ray node of the pool: its id, address, GPUs and their type."""

    node_id: str
    ip: str
    gpus: int
    gpu_type: str


def node_gpu_type(node: Mapping[str, Any], gpu_type_resources: Mapping[str, str]) -> str:
    """A node's GPU type from what Ray says about it (`ray.nodes()` entry): module docstring, first rule first."""
    resources: Mapping[str, float] = node.get("Resources", {})
    for resource, gpu_type in gpu_type_resources.items():
        if resources.get(resource, 0) > 0:
            return gpu_type
    label = (node.get("Labels") or {}).get(ACCELERATOR_LABEL)
    if label:
        return type_from_device_name(label)
    named = sorted(
        r.removeprefix(ACCELERATOR_RESOURCE_PREFIX) for r in resources if r.startswith(ACCELERATOR_RESOURCE_PREFIX)
    )
    return type_from_device_name(named[0]) if named else UNKNOWN_GPU_TYPE


def _pool_order(node: RayNode) -> tuple[str, int, str]:
    return node.gpu_type, node.gpus, node.node_id


def pool_nodes(
    nodes: Sequence[Mapping[str, Any]], gpu_resource: str, gpu_type_resources: Mapping[str, str]
) -> list[RayNode]:
    """The alive nodes offering `gpu_resource`, in pool order: by type (in the order of their names), GPUs per
    node, then node id, so that each node group of the pool's `Cluster` is contiguous."""
    found = [
        RayNode(
            n["NodeID"],
            n["NodeManagerAddress"],
            int(n["Resources"][gpu_resource]),
            node_gpu_type(n, gpu_type_resources),
        )
        for n in nodes
        if n["Alive"] and n["Resources"].get(gpu_resource, 0) >= 1
    ]
    return sorted(found, key=_pool_order)


def pool_cluster(nodes: Sequence[RayNode]) -> Cluster:
    """The pool as the policy sees it: one node group per run of nodes of one type and size."""
    groups: list[NodeGroup] = []
    for node in nodes:
        last = groups[-1] if groups else None
        if last is not None and (last.gpu_type, last.gpus_per_node) == (node.gpu_type, node.gpus):
            groups[-1] = NodeGroup(last.gpu_type, last.num_nodes + 1, last.gpus_per_node)
        else:
            groups.append(NodeGroup(node.gpu_type, 1, node.gpus))
    return Cluster.of_groups(groups)


def keep_nodes(nodes: Sequence[RayNode], busy: set[str], keep: Mapping[str, int]) -> list[RayNode]:
    """At most `keep[type]` nodes of each type named there (all of a type not named), in pool order: the ones
    hosting worker groups (`busy` node ids) first, then by node id; the others are left idle for Ray's autoscaler
    to release."""
    chosen: list[RayNode] = []
    for gpu_type in dict.fromkeys(n.gpu_type for n in nodes):
        of_type = sorted((n for n in nodes if n.gpu_type == gpu_type), key=lambda n: (n.node_id not in busy, n.node_id))
        chosen.extend(of_type[: keep.get(gpu_type, len(of_type))])
    return sorted(chosen, key=_pool_order)


def renumbering(old: Sequence[RayNode], new: Sequence[RayNode]) -> dict[int, int]:
    """The new index of each old pool node that is still in the pool (one missing from the map is gone)."""
    new_index = {n.node_id: i for i, n in enumerate(new)}
    return {i: new_index[n.node_id] for i, n in enumerate(old) if n.node_id in new_index}


def _ray_nodes() -> Sequence[Mapping[str, Any]]:
    import ray

    return ray.nodes()


class NodePool:
    """The nodes the launcher schedules on, numbered as the policy sees them (node i of an allocation is `nodes[i]`),
    with the alive ids Ray lists and the nodes left out after a failed reservation (module docstring).

    Not locked: the launcher calls it under its own lock, except `alive_ids`, which any thread may call (it swaps
    one tuple). `list_nodes` and `clock` are Ray's node table and the monotonic clock, unless given."""

    def __init__(
        self,
        gpu_resource: str,
        gpu_type_resources: Mapping[str, str] | None = None,
        *,
        list_nodes: NodeList = _ray_nodes,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.gpu_resource = gpu_resource
        self._gpu_type_resources = dict(gpu_type_resources or {})
        self._list_nodes, self._clock = list_nodes, clock
        self._alive_seen: tuple[float, frozenset[str]] = (-math.inf, frozenset())  # (when, alive node ids)
        self._quarantined: dict[str, float] = {}  # node id -> until when it is left out
        self._nodes = self.alive_nodes()
        self._cluster: Cluster | None = pool_cluster(self._nodes) if self._nodes else None

    @property
    def cluster(self) -> Cluster:
        """The pool as the policy sees it. Only for a pool with nodes: see `has_nodes`."""
        if self._cluster is None:
            raise LaunchError("the Ray cluster has no node offering the GPU resource yet", transient=True)
        return self._cluster

    @property
    def has_nodes(self) -> bool:
        """Whether the pool holds any node (an autoscaled cluster may have none)."""
        return self._cluster is not None

    @property
    def nodes(self) -> list[RayNode]:
        return list(self._nodes)

    @property
    def node_ids(self) -> list[str]:
        """The Ray node id of each pool node, in pool order."""
        return [n.node_id for n in self._nodes]

    def alive_nodes(self) -> list[RayNode]:
        """Every alive node of the Ray cluster offering the GPU resource now, in pool order."""
        nodes = self._list_nodes()
        self._alive_seen = (self._clock(), frozenset(n["NodeID"] for n in nodes if n["Alive"]))
        return pool_nodes(nodes, self.gpu_resource, self._gpu_type_resources)

    def alive_ids(self, fresh: bool = False) -> frozenset[str]:
        """The ids of the nodes Ray lists alive (with or without GPUs): read at most every `ALIVE_TTL_S`, or now
        if `fresh`."""
        seen_at, ids = self._alive_seen
        if fresh or self._clock() - seen_at > ALIVE_TTL_S:
            ids = frozenset(n["NodeID"] for n in self._list_nodes() if n["Alive"])
            self._alive_seen = (self._clock(), ids)
        return ids

    def quarantine(self, node_ids: Sequence[str]) -> None:
        """Leave nodes that failed a reservation out of the pool for `QUARANTINE_S` (module docstring)."""
        if not node_ids:
            return
        until = self._clock() + QUARANTINE_S
        for node_id in node_ids:
            self._quarantined[node_id] = until
        LOG.warning("leaving Ray node(s) %s out for %.0f s: a reservation failed", ", ".join(node_ids), QUARANTINE_S)

    def quarantined(self) -> frozenset[str]:
        """The nodes left out now: the quarantines not over, of nodes Ray listed alive when it was last asked
        (a node that left is forgotten: should it come back, it comes back clean)."""
        now, alive = self._clock(), self._alive_seen[1]
        self._quarantined = {n: t for n, t in self._quarantined.items() if t > now and n in alive}
        return frozenset(self._quarantined)

    def refresh(self, busy: set[str], keep: Mapping[str, int] | None = None) -> dict[int, int] | None:
        """Make the pool the alive nodes not quarantined (unless `busy`: a group of ours runs there), at most
        `keep[type]` of each type named there (`keep_nodes`). None when the pool did not change, else the new index
        of each old pool node still in it (`renumbering`)."""
        alive = self.alive_nodes()
        left_out = self.quarantined()
        alive = [n for n in alive if n.node_id not in left_out or n.node_id in busy]
        if keep is not None:
            alive = keep_nodes(alive, busy, keep)
        if [n.node_id for n in alive] == self.node_ids:
            return None
        remap = renumbering(self._nodes, alive)
        self._nodes = alive
        self._cluster = pool_cluster(alive) if alive else None
        return remap

    def rank_nodes(self, job: str, allocation: Allocation) -> list[int]:
        """The pool node of each rank (node order, then local), after checking that the allocation fits the pool
        (a permanent `LaunchError`) and that its nodes are alive and not quarantined now (a transient one)."""
        nodes = self._nodes
        if len(allocation) != len(nodes) or any(g < 0 for g in allocation) or sum(allocation) < 1:
            raise LaunchError(
                f"job {job}: allocation {allocation} must list >= 0 GPUs for each of the {len(nodes)} "
                "Ray nodes, at least one in all"
            )
        for i, gpus in enumerate(allocation):
            if gpus > nodes[i].gpus:
                raise LaunchError(
                    f"job {job}: allocation {allocation} asks for {gpus} {self.gpu_resource} on node {i}, "
                    f"which has {nodes[i].gpus}"
                )
        alive = self.alive_ids(fresh=True)
        quarantined = self.quarantined()
        for i, gpus in enumerate(allocation):
            if gpus and nodes[i].node_id not in alive:
                raise LaunchError(
                    f"job {job}: node {i} (Ray node {nodes[i].node_id}) is not alive (restarting?)", transient=True
                )
            if gpus and nodes[i].node_id in quarantined:
                raise LaunchError(
                    f"job {job}: node {i} (Ray node {nodes[i].node_id}) failed a reservation lately; "
                    f"left out for up to {QUARANTINE_S:g} s unless Ray declares it dead",
                    transient=True,
                )
        return [i for i, gpus in enumerate(allocation) for _ in range(gpus)]
