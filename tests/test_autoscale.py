"""The autoscaling decision (pollux.autoscale): the utility, the bisection toward the band's middle, the window."""

import pytest

from pollux.autoscale import (
    Autoscaler,
    AutoscaleSettings,
    SpeedupTables,
    cluster_utility,
    kept_nodes,
    moved_allocation,
    release_order,
    search_nodes,
    with_nodes,
)
from pollux.cluster import Cluster
from pollux.errors import SpecError
from pollux.policies.base import JobView
from pollux.policies.registry import make_policy


def view(name, allocation, submit=0.0):
    return JobView(
        name=name,
        application="cifar10",
        submit_time_s=submit,
        allocation=allocation,
        num_restarts=0,
        attained_service_gpu_s=0.0,
        requested_gpus=1,
        max_gpus=64,
        init_batch_size=128,
        max_batch_size=4096,
        local_bsz_bounds=(32, 1024),
    )


def test_a_maximum_below_the_minimum_is_refused_naming_both():
    with pytest.raises(SpecError, match=r"max_nodes \(2\) is below min_nodes \(4\)"):
        AutoscaleSettings(min_nodes=4, max_nodes=2)


@pytest.mark.parametrize("low,high,expected", [(1, 64, 16), (1, 8, 8), (32, 64, 32), (15, 17, 16)])
def test_bisection_finds_the_count_whose_utility_is_closest_to_the_target(low, high, expected):
    asked = []

    def utility(nodes):
        asked.append(nodes)
        return 8 / nodes  # falls as nodes are added

    assert search_nodes(utility, low, high, 0.5) == expected
    assert all(low <= n <= high for n in asked)
    assert len(set(asked)) <= 2 + (high - low).bit_length()


def test_unmeasured_jobs_scale_linearly_so_a_busy_cluster_has_utility_one():
    jobs = [view("a", (4, 0)), view("b", (0, 4))]
    tables = SpeedupTables(jobs, 8)
    assert cluster_utility({j.name: j.allocation for j in jobs}, 8, tables) == pytest.approx(1.0)
    assert cluster_utility({"a": (4, 0)}, 8, tables) == pytest.approx(0.5)  # half the GPUs idle


def test_shrinking_gives_back_free_nodes_first_and_renumbers_the_rest():
    cluster = Cluster(4, 4)
    allocations = [(0, 4, 0, 0), (0, 0, 0, 2)]
    assert release_order(cluster, allocations)[:2] == [2, 0]
    kept = kept_nodes(cluster, allocations, 2)
    assert kept == [1, 3]
    assert moved_allocation((0, 4, 0, 0), kept, 2) == (4, 0)
    assert moved_allocation((0, 0, 0, 2), kept, 3) == (0, 2, 0)  # a new node appended empty
    assert moved_allocation((2, 2, 0, 0), [1, 3], 2) == (0, 0)  # held a node given back: stops, whole


def test_no_decision_until_the_window_is_full_then_an_idle_cluster_shrinks():
    settings = AutoscaleSettings(1, 8, window_rounds=3)
    scaler = Autoscaler(settings)
    cluster = Cluster(8, 4)
    jobs = [view("a", (1,) + (0,) * 7)]  # 1 GPU of 32 busy: utility 1/32
    policy = make_policy("fifo")
    first = [scaler.step(jobs, cluster, 60.0 * i, policy) for i in range(2)]
    assert [d.nodes for d in first] == [8, 8] and not any(d.resized for d in first)
    decision = scaler.step(jobs, cluster, 120.0, policy)
    assert decision.resized and decision.utility == pytest.approx(1 / 32)
    assert decision.nodes == 1 and decision.nodes_by_type == {"aws": 1}
    assert not scaler.step(jobs, with_nodes(cluster, 1), 180.0, policy).resized  # the window starts afresh


def test_typed_clusters_are_refused_until_searched_per_type():
    from pollux.cluster_spec import load_cluster

    cluster = load_cluster("sia-heterogeneous")
    with pytest.raises(SpecError, match="one GPU type"):
        Autoscaler(AutoscaleSettings(1, 4)).step([view("a", cluster.empty())], cluster, 0.0, make_policy("fifo"))
