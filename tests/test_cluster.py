"""Placement rules every policy's output must keep."""

import pytest

from pollux.cluster import Cluster, NodeGroup, free_gpus, placement, validate_allocations
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


MIXED = Cluster.of_groups([NodeGroup("aws", 2, 4), NodeGroup("rtx", 1, 8), NodeGroup("aws", 1, 2)])


def test_nodes_are_numbered_group_after_group_with_their_size_and_type():
    assert MIXED.node_gpus == (4, 4, 8, 2)
    assert MIXED.node_types == ("aws", "aws", "rtx", "aws")
    assert (MIXED.num_nodes, MIXED.num_gpus, MIXED.max_gpus_per_node) == (4, 18, 8)
    assert MIXED.gpu_types == ("aws", "rtx") and MIXED.heterogeneous
    assert MIXED.nodes_of_type("aws") == (0, 1, 3) and MIXED.gpus_of_type("aws") == 10
    assert MIXED.describe() == "2×4 aws + 1×8 rtx + 1×2 aws"


def test_the_shorthand_is_one_uniform_group_of_aws_nodes():
    cluster = Cluster(3, 4)
    assert cluster == Cluster.of_groups([NodeGroup("aws", 3, 4)])
    assert cluster.uniform and not cluster.heterogeneous and cluster.gpus_per_node == 4


def test_one_size_for_all_nodes_is_refused_where_nodes_differ():
    with pytest.raises(ValueError, match="node_gpus"):
        _ = MIXED.gpus_per_node
    same_size = Cluster.of_groups([NodeGroup("aws", 1, 8), NodeGroup("rtx", 2, 8)])
    assert same_size.uniform and same_size.gpus_per_node == 8


def test_an_allocation_has_one_gpu_type_or_none():
    assert MIXED.allocation_type((1, 0, 0, 2)) == "aws"
    assert MIXED.allocation_type((0, 0, 8, 0)) == "rtx"
    assert MIXED.allocation_type(MIXED.empty()) is None
    with pytest.raises(AllocationError, match="spans GPU types"):
        MIXED.allocation_type((1, 0, 1, 0))


def test_validation_refuses_a_job_spanning_two_types_and_checks_each_nodes_own_size():
    validate_allocations(MIXED, {"a": (4, 4, 0, 2), "b": (0, 0, 8, 0)})
    with pytest.raises(AllocationError, match=r"job a: .*spans"):
        validate_allocations(MIXED, {"a": (0, 1, 1, 0)})
    with pytest.raises(AllocationError, match="node 3: allocations use 3 GPUs, it has 2"):
        validate_allocations(MIXED, {"a": (0, 0, 0, 3)})


@pytest.mark.parametrize(("nodes", "gpus"), [(0, 4), (2, 0), (-1, 4)])
def test_an_empty_group_is_refused(nodes, gpus):
    with pytest.raises(SpecError):
        NodeGroup("aws", nodes, gpus)


def test_scaling_keeps_the_mix_and_order_and_refuses_a_factor_below_one():
    bigger = MIXED.scaled(3)
    assert [(g.gpu_type, g.num_nodes, g.gpus_per_node) for g in bigger.groups] == [
        (g.gpu_type, 3 * g.num_nodes, g.gpus_per_node) for g in MIXED.groups
    ]
    assert bigger.num_gpus == 3 * MIXED.num_gpus
    with pytest.raises(SpecError, match="factor"):
        MIXED.scaled(0)
