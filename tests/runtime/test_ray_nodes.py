"""The Ray launcher's node pool, from Ray's node table as `ray.nodes()` gives it: which nodes offer GPUs, their
numbering, the nodes that left, joined or failed a reservation. No Ray cluster: the table and the clock are data."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from pollux.cluster import Cluster, NodeGroup
from pollux.errors import LaunchError
from pollux.runtime.ray_nodes import ALIVE_TTL_S, QUARANTINE_S, NodePool, RayNode, keep_nodes, renumbering

RESOURCE = "pollux_gpu"


def ray_node(node_id: str, gpus: int = 2, kind: str | None = None, alive: bool = True) -> dict[str, Any]:
    resources: dict[str, float] = {"CPU": 2.0, RESOURCE: float(gpus)} if gpus else {"CPU": 2.0}
    if kind is not None:
        resources[f"accelerator_type:{kind}"] = 1.0
    return {"NodeID": node_id, "NodeManagerAddress": f"ip-{node_id}", "Alive": alive, "Resources": resources}


class Ray:
    """Ray's node table as a test changes it, counting how often the pool reads it, and a clock it moves."""

    def __init__(self, *nodes: dict[str, Any]) -> None:
        self.nodes: dict[str, dict[str, Any]] = {n["NodeID"]: n for n in nodes}
        self.reads = 0
        self.now = 100.0

    def table(self) -> list[Mapping[str, Any]]:
        self.reads += 1
        return list(self.nodes.values())

    def add(self, node: dict[str, Any]) -> None:
        self.nodes[node["NodeID"]] = node

    def lose(self, node_id: str) -> None:
        self.nodes[node_id] = {**self.nodes[node_id], "Alive": False}

    def pool(self) -> NodePool:
        return NodePool(RESOURCE, list_nodes=self.table, clock=lambda: self.now)


def test_the_pool_is_the_alive_nodes_offering_the_resource_by_type_size_and_id() -> None:
    ray = Ray(ray_node("c", 2, "T4"), ray_node("a", 4, "A100"), ray_node("b", 2, "T4"), ray_node("head", 0))
    ray.add(ray_node("d", 2, "T4", alive=False))
    pool = ray.pool()
    assert pool.node_ids == ["a", "b", "c"]
    assert pool.nodes[0] == RayNode("a", "ip-a", 4, "a100")
    assert pool.cluster == Cluster.of_groups([NodeGroup("a100", 1, 4), NodeGroup("t4", 2, 2)])


def test_an_empty_pool_has_no_cluster_until_a_node_joins() -> None:
    ray = Ray(ray_node("head", 0))
    pool = ray.pool()
    assert not pool.has_nodes
    with pytest.raises(LaunchError, match="no node offering") as refused:
        pool.cluster  # noqa: B018
    assert refused.value.transient
    ray.add(ray_node("a"))
    assert pool.refresh(busy=set()) == {} and pool.has_nodes and pool.node_ids == ["a"]


def test_ranks_go_to_their_nodes_in_node_order_then_local() -> None:
    pool = Ray(ray_node("a"), ray_node("b")).pool()
    assert pool.rank_nodes("j", (1, 2)) == [0, 1, 1]
    assert pool.rank_nodes("j", (0, 1)) == [1]


@pytest.mark.parametrize("allocation", [(3, 0), (1,), (0, 0), (1, -1), (1, 1, 1)])
def test_an_allocation_that_does_not_fit_the_pool_is_refused_for_good(allocation: tuple[int, ...]) -> None:
    pool = Ray(ray_node("a"), ray_node("b")).pool()
    with pytest.raises(LaunchError, match=r"job j: allocation") as refused:
        pool.rank_nodes("j", allocation)
    assert not refused.value.transient


def test_a_launch_onto_a_node_ray_lists_dead_is_refused_for_now_whatever_the_cache_says() -> None:
    ray = Ray(ray_node("a"), ray_node("b"))
    pool = ray.pool()
    assert pool.alive_ids() == {"a", "b"}
    ray.lose("b")
    with pytest.raises(LaunchError, match=r"node 1 \(Ray node b\) is not alive") as refused:
        pool.rank_nodes("j", (0, 1))
    assert refused.value.transient
    assert pool.rank_nodes("j", (1, 0)) == [0]


def test_ray_is_asked_for_alive_nodes_at_most_once_a_ttl_unless_fresh() -> None:
    ray = Ray(ray_node("a"))
    pool = ray.pool()
    reads = ray.reads
    ray.lose("a")
    assert pool.alive_ids() == {"a"} and ray.reads == reads  # still the answer read at start
    assert pool.alive_ids(fresh=True) == frozenset() and ray.reads == reads + 1
    ray.add(ray_node("a"))
    ray.now += ALIVE_TTL_S / 2
    assert pool.alive_ids() == frozenset() and ray.reads == reads + 1
    ray.now += ALIVE_TTL_S
    assert pool.alive_ids() == {"a"} and ray.reads == reads + 2


def test_a_node_that_failed_a_reservation_is_refused_and_left_out_until_its_quarantine_ends() -> None:
    ray = Ray(ray_node("a"), ray_node("b"))
    pool = ray.pool()
    pool.quarantine(["b"])
    with pytest.raises(LaunchError, match="failed a reservation lately") as refused:
        pool.rank_nodes("j", (1, 1))
    assert refused.value.transient
    assert pool.refresh(busy=set()) == {0: 0} and pool.node_ids == ["a"]
    ray.now += QUARANTINE_S / 2
    assert pool.refresh(busy=set()) is None  # still out
    ray.now += QUARANTINE_S
    assert pool.refresh(busy=set()) == {0: 0} and pool.node_ids == ["a", "b"]
    assert pool.rank_nodes("j", (1, 1)) == [0, 1]


def test_a_quarantined_node_a_group_of_ours_runs_on_stays_in_the_pool() -> None:
    pool = Ray(ray_node("a"), ray_node("b")).pool()
    pool.quarantine(["b"])
    assert pool.refresh(busy={"b"}) is None and pool.node_ids == ["a", "b"]


def test_a_quarantined_node_that_ray_declares_dead_comes_back_clean() -> None:
    ray = Ray(ray_node("a"), ray_node("b"))
    pool = ray.pool()
    pool.quarantine(["b"])
    ray.lose("b")
    assert pool.refresh(busy=set()) == {0: 0}
    ray.add(ray_node("b"))  # restarted under the same id, long before the quarantine would have ended
    assert pool.refresh(busy=set()) == {0: 0} and pool.node_ids == ["a", "b"]


def test_refresh_renumbers_the_nodes_kept_and_leaves_out_the_ones_lost() -> None:
    ray = Ray(ray_node("b"), ray_node("d"))
    pool = ray.pool()
    assert pool.refresh(busy=set()) is None
    ray.add(ray_node("a"))
    ray.add(ray_node("c"))
    ray.lose("d")
    assert pool.refresh(busy=set()) == {0: 1}  # b moved from 0 to 1; d (old 1) is gone
    assert pool.node_ids == ["a", "b", "c"]


def test_keep_holds_the_busy_nodes_of_a_type_first_and_every_node_of_a_type_not_named() -> None:
    nodes = [RayNode(i, "ip", 2, "a100") for i in "abcd"] + [RayNode("t", "ip", 4, "t4")]
    assert [n.node_id for n in keep_nodes(nodes, busy={"c"}, keep={"a100": 2})] == ["a", "c", "t"]
    assert [n.node_id for n in keep_nodes(nodes, busy=set(), keep={"a100": 0, "t4": 1})] == ["t"]


def test_renumbering_maps_each_old_index_still_in_the_pool_to_its_new_one() -> None:
    old = [RayNode(i, "ip", 2, "gpu") for i in "abc"]
    new = [RayNode(i, "ip", 2, "gpu") for i in "cxa"]
    assert renumbering(old, new) == {0: 2, 2: 0}
