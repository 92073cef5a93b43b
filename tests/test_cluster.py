"""Placement rules every policy's output must keep."""

import pytest

from pollux.cluster import Cluster, free_gpus, placement, validate_allocations
from pollux.errors import AllocationError, SpecError


def test_free_gpus_subtracts_every_allocation():
    cluster = Cluster(num_nodes=3, gpus_per_node=4)
    assert free_gpus(cluster, {"a": (4, 1, 0), "b": (0, 2, 3)}) == [0, 1, 1]


def test_overcommitted_node_is_refused_with_the_node_named():
    cluster = Cluster(num_nodes=2, gpus_per_node=4)
    with pytest.raises(AllocationError, match="node 1"):
        validate_allocations(cluster, {"a": (0, 3), "b": (1, 2)})


def test_two_distributed_jobs_never_share_a_node_when_avoiding_interference():
    cluster = Cluster(num_nodes=3, gpus_per_node=4)
    shared = {"a": (2, 2, 0), "b": (0, 2, 2)}
    validate_allocations(cluster, shared)  # allowed without avoidance
    with pytest.raises(AllocationError, match="share"):
        validate_allocations(cluster, shared, avoid_sharing=True)
    validate_allocations(cluster, {"a": (2, 2, 0), "b": (0, 0, 4), "c": (2, 0, 0)}, avoid_sharing=True)


def test_allocation_must_cover_every_node():
    with pytest.raises(AllocationError, match="job a"):
        validate_allocations(Cluster(2, 4), {"a": (1,)})


def test_placement_drops_empty_nodes():
    assert placement((0, 2, 0, 4)) == (2, 4)


@pytest.mark.parametrize("nodes,gpus", [(0, 4), (2, 0)])
def test_empty_cluster_is_refused(nodes, gpus):
    with pytest.raises(SpecError):
        Cluster(nodes, gpus)
