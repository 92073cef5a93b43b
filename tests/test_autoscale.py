"""The autoscaling decision (pollux.autoscale): the utility, the bisection toward the band's middle, the window;
on several GPU types, each type's own bounds, window and search, and the start rule for a type without nodes."""

from dataclasses import replace

import numpy as np
import pytest

from pollux.autoscale import (
    Autoscaler,
    AutoscaleSettings,
    NodeType,
    SpeedupTables,
    cluster_utility,
    kept_nodes,
    moved_allocation,
    moved_to,
    release_order,
    resized,
    search_nodes,
    with_nodes,
)
from pollux.cluster import Cluster, validate_allocations
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


def test_a_typed_cluster_needs_each_types_bounds():
    from pollux.cluster_spec import load_cluster

    cluster = load_cluster("sia-heterogeneous")
    with pytest.raises(SpecError, match="one GPU type; give each type its bounds"):
        Autoscaler(AutoscaleSettings(1, 4)).step([view("a", cluster.empty())], cluster, 0.0, make_policy("fifo"))


# -- several GPU types: two node types of 2 GPUs each, as `pollux up --node-type a100:2:0:3 --node-type rtx:2:0:3`
TYPES = (NodeType("a100", 2, 0, 3), NodeType("rtx", 2, 0, 3))


def typed(window_rounds=1, types=TYPES):
    return AutoscaleSettings.per_type(types, window_rounds=window_rounds, idle_to_minimum=True)


def on(counts, jobs=(), policy="fifo"):
    """The cluster of `counts` nodes per type (None: no node), and `jobs` placed on it by `policy`."""
    settings = typed()
    cluster, _ = resized(None, [], settings.bounds(None), counts)
    if cluster is None or not jobs:
        return cluster, list(jobs)
    fresh = [replace(job, allocation=cluster.empty()) for job in jobs]
    result = make_policy(policy).optimize(fresh, cluster, 600.0)
    return cluster, [replace(job, allocation=result.allocations.get(job.name, cluster.empty())) for job in fresh]


def pinned(name, gpu_type, gpus=2, submit=0.0):
    return replace(view(name, (), submit), gpu_types=(gpu_type,), requested_gpus=gpus, max_gpus=gpus)


def test_resizing_one_type_keeps_the_others_nodes_and_gives_back_its_free_nodes_first():
    cluster, _ = on({"a100": 2, "rtx": 3})
    jobs = [(1, 0, 0, 1, 0), (0, 0, 2, 0, 0)]  # on a100 node 0 and rtx nodes 2 and 3; nodes 1 and 4 free
    candidate, sources = resized(cluster, jobs, typed().bounds(cluster), {"a100": 1, "rtx": 4})
    assert candidate.describe() == "1×2 a100 + 4×2 rtx" and sources == [0, 2, 3, 4, None]
    smaller, sources = resized(cluster, jobs, typed().bounds(cluster), {"a100": 2, "rtx": 1})
    assert smaller.describe() == "2×2 a100 + 1×2 rtx" and sources == [0, 1, 2]  # rtx keeps its busiest node
    assert [moved_to(job, sources) for job in jobs] == [(0, 0, 0), (0, 0, 2)]  # the job on node 3 stops, whole


def test_each_types_node_count_stays_within_its_own_bounds_round_after_round():
    rng = np.random.default_rng(7)
    types = (NodeType("a100", 2, 1, 3), NodeType("rtx", 4, 0, 2))
    for trial in range(6):
        scaler = Autoscaler(typed(window_rounds=2, types=types))
        counts = {"a100": int(rng.integers(1, 4)), "rtx": int(rng.integers(0, 3))}
        for round_ in range(8):
            jobs = [
                pinned(f"j{i}", str(rng.choice(["a100", "rtx"])), int(rng.integers(1, 5)), submit=i)
                for i in range(int(rng.integers(0, 5)))
            ]
            cluster, jobs = on(counts, jobs)
            if cluster is not None:
                validate_allocations(cluster, {j.name: j.allocation for j in jobs})
            decision = scaler.step(jobs, cluster, 60.0 * round_, make_policy("fifo"), counts)
            for node in types:
                assert node.min_nodes <= decision.nodes_by_type[node.gpu_type] <= node.max_nodes, (trial, decision)
            assert decision.nodes == sum(decision.nodes_by_type.values())
            counts = dict(decision.nodes_by_type)


def test_a_type_whose_gpus_sit_idle_shrinks_while_the_busy_type_keeps_its_nodes():
    scaler = Autoscaler(typed(window_rounds=2, types=(NodeType("a100", 2, 0, 2), NodeType("rtx", 2, 0, 3))))
    counts = {"a100": 2, "rtx": 2}
    cluster, jobs = on(counts, [pinned("a", "a100"), pinned("b", "a100", submit=1.0)])  # a100 full, rtx idle
    first = scaler.step(jobs, cluster, 0.0, make_policy("fifo"), counts)
    assert not first.resized and first.nodes_by_type == counts  # one round is no window
    decision = scaler.step(jobs, cluster, 60.0, make_policy("fifo"), counts)
    assert decision.resized and decision.utility_by_type == {"a100": pytest.approx(1.0), "rtx": 0.0}
    assert decision.nodes_by_type == {"a100": 2, "rtx": 0}, decision.reason


def test_a_type_without_nodes_grows_at_once_for_a_waiting_job_and_only_a_type_it_may_use():
    scaler = Autoscaler(typed(window_rounds=15))
    counts = {"a100": 0, "rtx": 1}
    cluster, jobs = on(counts, [pinned("r", "rtx")])
    jobs.append(replace(pinned("new", "a100"), allocation=cluster.empty()))
    decision = scaler.step(jobs, cluster, 0.0, make_policy("fifo"), counts)
    assert decision.resized and decision.nodes_by_type["a100"] >= 1 and decision.nodes_by_type["rtx"] == 1
    only_rtx = Autoscaler(typed(window_rounds=15)).step(jobs[:1], cluster, 0.0, make_policy("fifo"), counts)
    assert only_rtx.nodes_by_type == counts and not only_rtx.resized  # nobody waits for an a100: none is started


def test_with_no_node_up_waiting_jobs_start_the_cluster_and_without_jobs_it_goes_to_its_minimum():
    scaler = Autoscaler(typed(window_rounds=15))
    jobs = [pinned("a", "a100"), pinned("r", "rtx", submit=1.0)]
    decision = scaler.step(jobs, None, 600.0, make_policy("pollux"), {})  # pollux starts no job of age 0
    assert decision.resized and decision.nodes_by_type["a100"] >= 1 and decision.nodes_by_type["rtx"] >= 1
    assert scaler.step([], None, 660.0, make_policy("pollux"), decision.nodes_by_type).nodes_by_type == {
        "a100": 0,
        "rtx": 0,
    }


def test_the_same_inputs_give_the_same_typed_decision():
    counts = {"a100": 3, "rtx": 1}
    jobs = [pinned("a", "a100"), view("any", (), 1.0), pinned("r", "rtx", submit=2.0)]
    cluster, jobs = on(counts, jobs, policy="pollux")
    decisions = []
    for _ in range(2):
        policy = make_policy("pollux")
        scaler = Autoscaler(typed(window_rounds=1))
        decisions.append([scaler.step(jobs, cluster, 600.0 + 60.0 * r, policy, counts) for r in range(2)])
    assert decisions[0] == decisions[1]
    assert any(d.resized for d in decisions[0])
