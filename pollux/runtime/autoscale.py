"""Cloud auto-scaling through Ray's own autoscaler (Pollux §5.4; docs/design.md, "The runtime").

Each round the service asks `pollux.autoscale.Autoscaler` (the simulator's rule: each GPU type's utility band, and
a type without nodes started at once for a job waiting for it) how many nodes of each type to hold, and hands that
to Ray with Ray's public API, `ray.autoscaler.sdk.request_resources`: one bundle per wanted node, shaped like a whole
node of that type, so Ray's autoscaler starts exactly the nodes missing and keeps them. Pollux provisions nothing
itself. Nodes it no longer wants are drained by the service (their jobs checkpoint and move) and then sit idle, and
Ray stops them after its idle timeout.

The node types come from the user (`--node-type TYPE:GPUS_PER_NODE:MIN:MAX`, matching the Ray cluster's
`available_node_types`): the rule needs them before any node of a type exists.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence

from pollux.autoscale import NodeType
from pollux.cluster import Cluster, NodeGroup
from pollux.errors import ServiceError, SpecError
from pollux.runtime.gpu_types import TYPE_NAME

LOG = logging.getLogger("pollux.runtime")
_STATUS_WAIT_S = 15.0  # Ray's monitor publishes its status every few seconds (AUTOSCALER_UPDATE_INTERVAL_S, 5)


def parse_node_types(values: Sequence[str]) -> list[NodeType]:
    """`--node-type TYPE:GPUS_PER_NODE:MIN:MAX` values; `SpecError` naming the value and the fix."""
    if not values:
        raise SpecError("--autoscale needs the node types Ray may start: --node-type TYPE:GPUS_PER_NODE:MIN:MAX")
    found: list[NodeType] = []
    for value in values:
        parts = value.split(":")
        if len(parts) != 4 or not TYPE_NAME.match(parts[0]) or not all(p.isdigit() for p in parts[1:]):
            raise SpecError(f"--node-type {value!r}: expected TYPE:GPUS_PER_NODE:MIN:MAX, e.g. a100:8:0:4")
        node = NodeType(parts[0], int(parts[1]), int(parts[2]), int(parts[3]))
        if node.gpus_per_node < 1:
            raise SpecError(f"--node-type {value!r}: GPUS_PER_NODE must be >= 1")
        if node.max_nodes < node.min_nodes:
            raise SpecError(
                f"--node-type {value!r}: the maximum {node.max_nodes} is below the minimum {node.min_nodes}; "
                "raise MAX or lower MIN"
            )
        if any(n.gpu_type == node.gpu_type for n in found):
            raise SpecError(f"--node-type {value!r}: type {node.gpu_type!r} is given twice; give each type once")
        found.append(node)
    if all(n.max_nodes == 0 for n in found):
        raise SpecError("--node-type: every maximum is 0, so no job could ever run; allow at least one node")
    return found


def largest_cluster(node_types: Sequence[NodeType]) -> Cluster:
    """The most the autoscaler may build: every type at its maximum, in type-name order (the pool's order)."""
    groups = [NodeGroup(n.gpu_type, n.max_nodes, n.gpus_per_node) for n in node_types if n.max_nodes > 0]
    return Cluster.of_groups(sorted(groups, key=lambda g: (g.gpu_type, g.gpus_per_node)))


class RayAutoscaler:
    """Asks Ray's autoscaler for nodes per GPU type (module docstring). Ray must be connected (the launcher)."""

    def __init__(
        self, node_types: Sequence[NodeType], gpu_resource: str, type_resources: Mapping[str, str] | None = None
    ) -> None:
        self.node_types = list(node_types)
        self.largest = largest_cluster(self.node_types)
        self._gpu_resource = gpu_resource
        self._type_resource = {t: r for r, t in (type_resources or {}).items()}
        self.requested: dict[str, int] | None = None

    def check_available(self, wait_s: float = _STATUS_WAIT_S) -> None:
        """Refuse a Ray cluster that runs no autoscaler. Ray's head always runs a monitor that publishes a status,
        but without an autoscaling config its node provider is read-only and names each node's type after the node
        itself (`node_<id>`); an autoscaler started from a config names them after its `available_node_types`.
        The monitor picks its provider once, at start, so the first status that names nodes settles it: only while
        none is published yet (a head just started) does this wait, up to `wait_s`."""
        from ray._private import ray_constants
        from ray.experimental.internal_kv import _internal_kv_get

        deadline = time.monotonic() + wait_s
        while True:
            raw = _internal_kv_get(ray_constants.DEBUG_AUTOSCALING_STATUS)
            report = json.loads(raw).get("autoscaler_report") if raw else None
            mapping = (report or {}).get("node_type_mapping") or {}
            if mapping and any(kind != f"node_{node}" for node, kind in mapping.items()):
                return
            if mapping or time.monotonic() >= deadline:  # a read-only provider's status, or none within wait_s
                raise ServiceError(
                    "--autoscale: this Ray cluster runs no autoscaler (its head was started without an autoscaling "
                    "config); start it with `ray up` or `ray start --head --autoscaling-config=...`, or drop "
                    "--autoscale"
                )
            time.sleep(0.5)

    def bundle(self, gpu_type: str) -> dict[str, float]:
        """A whole node of `gpu_type`: all its GPUs, and the resource that only nodes of that type offer."""
        gpus = next(n.gpus_per_node for n in self.node_types if n.gpu_type == gpu_type)
        marker = self._type_resource.get(gpu_type, f"accelerator_type:{gpu_type.upper()}")
        return {self._gpu_resource: float(gpus), marker: 0.001}

    def request(self, wanted: Mapping[str, int]) -> bool:
        """Ask Ray for exactly `wanted` nodes per type (replacing the previous request); True if it changed. Types
        Ray may not start (nodes of another type that joined the cluster) are not asked for."""
        from ray.autoscaler.sdk import request_resources

        known = {n.gpu_type for n in self.node_types}
        wanted = {t: n for t, n in sorted(wanted.items()) if n > 0 and t in known}
        if wanted == self.requested:
            return False
        request_resources(bundles=[self.bundle(t) for t, n in wanted.items() for _ in range(n)])
        LOG.info("autoscale: asked Ray for %s", ", ".join(f"{n} {t}" for t, n in wanted.items()) or "no GPU nodes")
        self.requested = wanted
        return True

    def release_all(self) -> None:
        """Withdraw the request (at shutdown): Ray stops the idle nodes after its timeout."""
        from ray.autoscaler.sdk import request_resources

        request_resources(bundles=[])
        self.requested = {}
